"""A line chart as a PNG, with nothing but the standard library (zlib and struct), so the
quickstart draws its reward curve without installing a plotting package."""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

WIDTH, HEIGHT, MARGIN = 640, 360, 30
WHITE, GREY, BLUE, BLACK = (255, 255, 255), (220, 220, 220), (30, 90, 200), (0, 0, 0)


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def write_png(path: Path, pixels: list[list[tuple[int, int, int]]]) -> None:
    """Write ``pixels`` (rows of RGB triples) as an 8-bit RGB PNG."""
    height, width = len(pixels), len(pixels[0])
    raw = b"".join(b"\x00" + bytes(c for pixel in row for c in pixel) for row in pixels)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )


def write_line_chart(
    path: Path, values: Sequence[float], *, low: float = 0.0, high: float = 1.0
) -> None:
    """Plot ``values`` (one per x step) between ``low`` and ``high``, with a grid every tenth."""
    pixels = [[WHITE] * WIDTH for _ in range(HEIGHT)]
    plot_w, plot_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN

    def to_xy(index: int, value: float) -> tuple[int, int]:
        x = MARGIN + (index * plot_w // max(1, len(values) - 1))
        share = (min(max(value, low), high) - low) / (high - low)
        return x, MARGIN + plot_h - round(share * plot_h)

    for tenth in range(11):
        y = MARGIN + plot_h - tenth * plot_h // 10
        for x in range(MARGIN, MARGIN + plot_w + 1):
            pixels[y][x] = BLACK if tenth == 0 else GREY
    for y in range(MARGIN, MARGIN + plot_h + 1):
        pixels[y][MARGIN] = BLACK
    points = [to_xy(i, v) for i, v in enumerate(values)]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for step in range(steps + 1):
            x = x0 + (x1 - x0) * step // steps
            y = y0 + (y1 - y0) * step // steps
            for dx in (-1, 0, 1):
                for dy in (-1, 0, 1):
                    pixels[y + dy][x + dx] = BLUE
    for x, y in points:
        for dx in range(-2, 3):
            for dy in range(-2, 3):
                pixels[y + dy][x + dx] = BLUE
    write_png(path, pixels)
