"""The links between devices the planner knows by name: one-way bandwidth and latency per hop.

Design: docs/design.md#interconnects
"""

import dataclasses
import numbers

__all__ = ["Interconnect", "INTERCONNECTS", "TCP_RING_SHARE", "resolve_interconnect"]

# The toolkit's tcp ring all-reduces at this share of the loopback's bandwidth each way (two
# TCP streams at once): benchmarks/bench_ring.py measured 0.56-0.68, the two side by side
# (docs/benchmarks.md#the-tcp-ring-against-its-link).
TCP_RING_SHARE = 0.6


@dataclasses.dataclass(frozen=True)
class Interconnect:
    """A link: `bandwidth` in bytes per second one way, `latency` in seconds per hop.

    `bandwidth` is what a ring all-reduce sees per device (NCCL's "bus bandwidth"), below
    the line rate; `source` says where the line rate comes from.
    """

    name: str
    bandwidth: float
    latency: float
    description: str = ""
    source: str = ""

    def all_reduce_latency(self, devices):
        """The fixed seconds of one ring all-reduce over `devices`: 2(N - 1) hops."""
        return 2 * (devices - 1) * self.latency


_PCIE = "https://pcisig.com/specifications (x16 per direction: 3.0 15.75, 4.0 31.5, 5.0 63 GB/s)"
_NVLINK = ("https://www.nvidia.com/en-us/data-center/nvlink/ (per GPU, per direction); "
           "NCCL sees ~80%: https://github.com/NVIDIA/nccl-tests/issues/212")
_IBTA = "https://www.infinibandta.org/ (EDR 100, HDR 200, NDR 400 Gbit/s per port)"
_ETHERNET = "IEEE 802.3 line rates; TCP and framing leave ~90%"


def _link(name, bandwidth, latency, description, source=""):
    return Interconnect(name, bandwidth, latency, description, source)


INTERCONNECTS = {
    link.name: link for link in (
        _link("pcie", 12e9, 10e-6, "PCIe 3.0 x16 between GPUs of one host (the same as "
              "pcie3)", _PCIE),
        _link("nvlink", 120e9, 5e-6, "NVLink 2, V100 SXM2 (the same as nvlink2)", _NVLINK),
        _link("pcie3", 12e9, 10e-6, "PCIe 3.0 x16: 15.75 GB/s line rate, about 12 GB/s "
              "between two GPUs", _PCIE),
        _link("pcie4", 24e9, 10e-6, "PCIe 4.0 x16: 31.5 GB/s line rate", _PCIE),
        _link("pcie5", 48e9, 10e-6, "PCIe 5.0 x16: 63 GB/s line rate", _PCIE),
        _link("nvlink1", 64e9, 5e-6, "NVLink 1, P100 SXM2 (DGX-1): 4 links of 20 GB/s, "
              "80 GB/s line rate", _NVLINK),
        _link("nvlink2", 120e9, 5e-6, "NVLink 2, V100 SXM2 (DGX-1, and DGX-2's NVSwitch): "
              "6 links of 25 GB/s, 150 GB/s line rate", _NVLINK),
        _link("nvlink3", 240e9, 5e-6, "NVLink 3, A100 SXM4 (DGX A100, NVSwitch): 12 links "
              "of 25 GB/s, 300 GB/s line rate", _NVLINK),
        _link("nvlink4", 360e9, 5e-6, "NVLink 4, H100 SXM5 (DGX H100, NVSwitch): 18 links "
              "of 25 GB/s, 450 GB/s line rate", _NVLINK),
        _link("infiniband-edr", 11.25e9, 5e-6, "InfiniBand EDR between hosts, 100 Gbit/s "
              "(12.5 GB/s) per port", _IBTA),
        _link("infiniband-hdr", 22.5e9, 5e-6, "InfiniBand HDR, 200 Gbit/s (25 GB/s) per port",
              _IBTA),
        _link("infiniband-ndr", 45e9, 5e-6, "InfiniBand NDR, 400 Gbit/s (50 GB/s) per port",
              _IBTA),
        _link("ethernet-10g", 1.125e9, 50e-6, "10 Gbit/s Ethernet (1.25 GB/s), TCP",
              _ETHERNET),
        _link("ethernet-25g", 2.8125e9, 50e-6, "25 Gbit/s Ethernet (3.125 GB/s), TCP",
              _ETHERNET),
        _link("ethernet-100g", 11.25e9, 30e-6, "100 Gbit/s Ethernet (12.5 GB/s), TCP",
              _ETHERNET),
        _link("loopback", 0.0, 1e-3, "workers on this machine over 127.0.0.1: bandwidth "
              "measured by a TCP stream when used, 1 ms per hop for TensorFlow's gRPC "
              "collectives"),
        _link("loopback-tcp", 0.0, 50e-6, "workers on this machine over the toolkit's tcp "
              "ring (transport='tcp'): the loopback's bandwidth as two TCP streams at once "
              "measure it when used, times TCP_RING_SHARE; 50 us per hop"),
    )
}


def resolve_interconnect(interconnect="pcie", *, bandwidth=None, latency=None):
    """Returns the `Interconnect` named in `INTERCONNECTS`, `bandwidth` or `latency` overridden.

    Raises `ValueError`, listing the known names, for an unknown one, and for a bandwidth
    not positive or a negative latency.

    Example:

    ```python
    link = resolve_interconnect("ethernet-25g")
    link.bandwidth  # 2.8125e9 bytes/s
    ```
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
    elif name == "loopback-tcp" and bandwidth is None:
        from mgpu_tf.planner import cost_model

        # A ring of two sends and receives at once: two opposite streams share the link.
        bandwidth = TCP_RING_SHARE * cost_model.measure_loopback_bandwidth(streams=2)
    return dataclasses.replace(
        link, bandwidth=float(bandwidth if bandwidth is not None else link.bandwidth),
        latency=float(latency if latency is not None else link.latency))
