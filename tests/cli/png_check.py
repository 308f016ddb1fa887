#!/usr/bin/env python3
"""tests/cli/png_check.py W H FILE... - checks that each PNG is W x H and
not blank: it decodes the image (zlib and the PNG row filters, by hand:
Debian's python3 has no image library by default) and wants at least 1 %
of the pixels off the background colour and at least 4 colours (a plot
with its axes, text and bars or lines). Prints one line per file; exits
1 if any fails."""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = ihdr
    channels = {2: 3, 6: 4, 0: 1, 4: 2}.get(colour)
    if depth != 8 or channels is None or interlace:
        raise ValueError("unsupported PNG layout (depth %d, colour type %d)" % (depth, colour))
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev, at = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
        at += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = prev[i]
            upleft = prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - upleft
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - upleft)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else upleft
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


def main():
    want_w, want_h, files = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    failed = 0
    for path in files:
        try:
            w, h, ch, rows = decode(path)
            counts = {}
            for row in rows[::2]:
                for x in range(0, w * ch, ch * 2):
                    px = row[x:x + ch]
                    counts[px] = counts.get(px, 0) + 1
            total = sum(counts.values())
            background = max(counts.values())
            inked = 1 - background / total
            ok = (w, h) == (want_w, want_h) and inked >= 0.01 and len(counts) >= 4
            print("%s %s: %dx%d, %.1f%% inked, %d colours" % ("ok" if ok else "FAIL", path, w, h, 100 * inked, len(counts)))
            failed += not ok
        except (OSError, ValueError, zlib.error, TypeError) as e:
            print("FAIL %s: %s" % (path, e))
            failed += 1
    sys.exit(1 if failed else 0)


main()
