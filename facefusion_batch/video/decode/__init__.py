"""Reading a video file as it is: probing, the threaded reader, timestamps, the frame index and
the packet-level parsers behind it, where the packets stop, and what NVDEC/NVENC can do here."""
