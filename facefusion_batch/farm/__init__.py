"""Scale-out (docs/farm.md): frame-range segments, their join, farm plans, many inputs,
resumable chunked renders and Ray. Ray is imported only by `ray_runner`, only for `--ray`."""
