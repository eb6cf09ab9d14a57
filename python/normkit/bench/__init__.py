"""`normkit bench`: RMSNorm bandwidth against a device copy and the peers (DESIGN §4).

The package is split by concern so that each part can be read, tested and
changed on its own, and so that `normkit --help` can describe the command
without importing torch:

    options  the command's flags, their defaults and checks (no torch)
    shapes   which shapes a run sweeps
    traffic  the bytes each shape must move (what GB/s is counted against)
    timing   CUDA events, CUDA-graph replay, wall-clock timing, input rotation
    impls    normkit and the peers: how each is called and what is timed
    check    the fp32 reference and the agreement check before any timing
    meta     the environment a result was measured in
    runner   the sweep: inputs, checks, timings, rows
    report   the printed table, the JSON and the plot
    validate the JSON Schema check (imports jsonschema; tests and CI only)
"""
