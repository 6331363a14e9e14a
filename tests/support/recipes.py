"""A documentation recipe run in this process, and trained by plain Keras with its update changed.

The recipe's script defines `build_model`, `examples`, `GLOBAL_BATCH` and `EPOCHS`.
"""

import runpy

__all__ = ["load", "fit"]


def load(path, text):
    """Writes the recipe's `text` to `path` and returns the names its script defines."""
    path.write_text(text)
    return runpy.run_path(str(path))


def fit(recipe, learning_rate, steps=None):
    """The recipe's model after plain Keras `fit` of its global batches at `learning_rate`,
    on the first `steps` batches of each epoch (all of them by default); `(model, history)`."""
    batches = recipe["examples"]().batch(recipe["GLOBAL_BATCH"], drop_remainder=True)
    model = recipe["build_model"]()
    model.optimizer.learning_rate.assign(learning_rate)
    data = batches if steps is None else batches.take(steps)
    history = model.fit(data, epochs=recipe["EPOCHS"], shuffle=False, verbose=0)
    return model, history
