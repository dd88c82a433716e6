"""Compositing outputs: the face-only layer with alpha and the matte, and the writers of both."""
