"""Tiny media payloads for the media tests, as base64."""

import base64

# a 1x1 PNG, and the first bytes of a JPEG and of a WAV file
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYPj/HwADAgH/"
    "eL9GtQAAAABJRU5ErkJggg=="
)
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 16).decode()
WAV = base64.b64encode(b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 24).decode()
