"""One module per workload; each turns a spec into measured points."""
