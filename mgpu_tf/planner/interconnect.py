"""The links between devices the planner knows by name: one-way bandwidth and latency per hop.

These are the defaults `mgpu_tf.plan` and `mgpu-tf plan --interconnect` use, and the
one place they are written down (docs/planner.md lists them). A ring all-reduce
over N devices takes 2(N - 1) hops, so its fixed cost is 2(N - 1) times the
latency; the time per byte comes from `mgpu_tf.planner.cost_model`.
"""

import dataclasses
import numbers

__all__ = ["Interconnect", "INTERCONNECTS", "resolve_interconnect"]


@dataclasses.dataclass(frozen=True)
class Interconnect:
    """A link: `bandwidth` in bytes per second one way, `latency` in seconds per hop."""

    name: str
    bandwidth: float
    latency: float
    description: str = ""

    def all_reduce_latency(self, devices):
        """The fixed seconds of one ring all-reduce over `devices`: 2(N - 1) hops."""
        return 2 * (devices - 1) * self.latency


INTERCONNECTS = {
    link.name: link for link in (
        Interconnect("pcie", 12e9, 10e-6, "PCIe 3.0 x16 between GPUs of one host, "
                     "about 12 GB/s in practice (15.75 GB/s raw)"),
        Interconnect("nvlink", 150e9, 5e-6, "NVLink 2 (V100, 6 links of 25 GB/s), "
                     "150 GB/s one way per GPU"),
        Interconnect("ethernet-25g", 25e9 / 8, 50e-6, "25 Gbit/s Ethernet between hosts, "
                     "3.125 GB/s"),
        Interconnect("ethernet-100g", 100e9 / 8, 30e-6, "100 Gbit/s Ethernet between hosts, "
                     "12.5 GB/s"),
        Interconnect("loopback", 0.0, 1e-3, "workers on this machine over 127.0.0.1: "
                     "bandwidth measured by a TCP stream when used, 1 ms per hop for "
                     "TensorFlow's gRPC collectives"),
    )
}


def resolve_interconnect(interconnect="pcie", *, bandwidth=None, latency=None):
    """Returns the `Interconnect` named, with `bandwidth` or `latency` overriding its figures.

    Example:

    ```python
    link = resolve_interconnect("ethernet-25g")
    link.bandwidth  # 3.125e9 bytes/s
    ```

    Args:
        interconnect: a name from `INTERCONNECTS`. Defaults to `"pcie"`.
        bandwidth: bytes per second one way, instead of the named link's.
        latency: seconds per hop, instead of the named link's.

    Raises:
        ValueError: for an unknown name; the message lists the known ones.
        ValueError: for a bandwidth that is not positive or a negative latency.
    """
    name = str(interconnect).strip().lower()
    if name not in INTERCONNECTS:
        raise ValueError(f"Unknown interconnect {interconnect!r}. Known: "
                         f"{', '.join(INTERCONNECTS)}. Or pass bandwidth= in bytes per second.")
    link = INTERCONNECTS[name]
    for label, value, positive in (("bandwidth", bandwidth, True), ("latency", latency, False)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0 \
                or (positive and value == 0):
            raise ValueError(f"`{label}` must be a {'positive' if positive else 'non-negative'}"
                             f" number. Received: {label}={value!r}")
    if name == "loopback" and bandwidth is None:
        from mgpu_tf.planner import cost_model

        bandwidth = cost_model.measure_loopback_bandwidth()
    return dataclasses.replace(
        link, bandwidth=float(bandwidth if bandwidth is not None else link.bandwidth),
        latency=float(latency if latency is not None else link.latency))
