"""The private Keras name `mgpu_tf.model_parallel.graph` reads to walk a layer graph.

A Keras mask rides on a tensor as an attribute, which a pipeline cut (a copy to another
device) drops; the accessor works as `compat.private`'s do.
"""

from mgpu_tf.compat.versions import check, missing

__all__ = ["keras_mask"]

_NAME = "keras.src.backend.common.masking.get_keras_mask"


def keras_mask(tensor):
    """Returns the Keras mask `tensor` carries (a symbolic one too), or None.

    `keras.src.backend.common.masking.get_keras_mask` (Keras 3.8-3.16), not exported.
    """
    check(_NAME)
    try:
        from keras.src.backend.common.masking import get_keras_mask
    except ImportError:
        raise missing(_NAME, f"tensor={tensor!r}") from None
    return get_keras_mask(tensor)
