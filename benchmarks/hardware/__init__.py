"""The machine a step runs on: chips as data, this machine's measured figures, what a step reads and computes,
its roofline and floor, whether a batch fits, and where a measurement came from (provenance)."""
