"""The scaling benchmark behind `mgpu-tf bench` and `benchmarks/`: fresh processes, timed."""
