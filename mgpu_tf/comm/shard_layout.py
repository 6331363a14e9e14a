"""Where each variable lies in the flat vector whose 1/N slices the replicas own.

Design: docs/concepts.md#optimizer-state-sharded-across-replicas
"""

import math

import numpy as np
import tensorflow as tf

__all__ = ["Layout"]


class Layout:
    """The trainable variables laid end to end, padded to `num_replicas` equal slices.

    Example:

    ```python
    layout = Layout([(3, 2), (5,)], 4)  # 11 numbers, 4 slices of 3, 1 of padding
    assert (layout.total, layout.slice_size, layout.padded) == (11, 3, 12)
    ```

    Args:
        shapes: each variable's shape, in the optimizer's order.
        num_replicas: how many slices.
    """

    def __init__(self, shapes, num_replicas):
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.sizes = [math.prod(s) for s in self.shapes]
        self.total = sum(self.sizes)
        self.num_replicas = int(num_replicas)
        self.slice_size = max(1, -(-self.total // self.num_replicas))
        self.padded = self.slice_size * self.num_replicas

    def pieces(self, replica):
        """`[(variable index, first, end), ...]`: the flat numbers slice `replica` covers."""
        begin, end = replica * self.slice_size, (replica + 1) * self.slice_size
        out, offset = [], 0
        for index, size in enumerate(self.sizes):
            first, last = max(begin, offset), min(end, offset + size)
            if first < last:
                out.append((index, first - offset, last - offset))
            offset += size
        return out

    def take(self, tensors, replica, dtype):
        """Slice `replica` (an int) of `tensors` laid end to end, padded, cast to `dtype`.

        Only the slice is made: no tensor of the whole vector.
        """
        parts = [tf.reshape(tf.cast(tensors[i], dtype), [-1])[first:end]
                 for i, first, end in self.pieces(replica)]
        covered = sum(end - first for _, first, end in self.pieces(replica))
        parts.append(tf.zeros([self.slice_size - covered], dtype))
        return tf.concat(parts, 0)

    def split(self, flat):
        """The variables' tensors of a padded flat tensor, each in its shape."""
        pieces = tf.split(flat[: self.total], self.sizes)
        return [tf.reshape(p, s) for p, s in zip(pieces, self.shapes)]

    def split_numpy(self, flat):
        """`split` for a numpy vector."""
        offsets = np.cumsum([0] + self.sizes)
        return [flat[a:b].reshape(s) for a, b, s in zip(offsets, offsets[1:], self.shapes)]

    def flatten_numpy(self, arrays):
        """The padded flat vector of numpy `arrays`, laid end to end."""
        flat = np.zeros(self.padded, np.asarray(arrays[0]).dtype) if arrays else np.zeros(0)
        offset = 0
        for array, size in zip(arrays, self.sizes):
            flat[offset: offset + size] = np.asarray(array).reshape(-1)
            offset += size
        return flat
