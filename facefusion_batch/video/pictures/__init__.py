"""What a frame is held as: the decoder's native pictures, yuv420p planes, EXR colour, interlaced
fields, and still images."""
