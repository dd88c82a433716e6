"""The only code that touches pixels: a protocol (base) and two kernel sets (host, torch);
`factory.make_kernels` chooses one for a loaded backend."""
