# SPDX-License-Identifier: Apache-2.0
"""Plain SVG line plots for the benchmark scripts (standard library only).

A Panel is one plot: x on a log2 axis (clients, bandwidths), y linear or log10; frame() draws the
axes, ticks and labels, line() one series. Callers put panels into one <svg> document:

    p = Panel(70, 80, 400, 220, [1, 2, 4], 0, 10, False, "title", "ms", "clients")
    svg = p.frame() + p.line([(1, 3), (2, 5), (4, 9)], "#1f77b4")
"""
import math


def nice_ticks(lo, hi, log):
    if log:
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        return [10 ** e for e in range(a, b + 1)]
    step = 10 ** (math.floor(math.log10(max(hi - lo, 1e-9))) - 1)
    for m in (1, 2, 5, 10, 20, 50, 100):
        if (hi - lo) / (step * m) <= 7:
            step *= m
            break
    t, out = 0.0, []
    while t <= hi * 1.0001:
        if t >= lo:
            out.append(t)
        t += step
    return out


class Panel:
    def __init__(self, x, y, w, h, xs, ylo, yhi, ylog, title, ylabel, xlabel="clients (closed loop)"):
        self.x, self.y, self.w, self.h = x, y, w, h
        self.xlo, self.xhi = math.log2(min(xs)), math.log2(max(xs))
        if self.xhi == self.xlo:
            self.xhi += 1
        self.ylog = ylog
        if ylog:
            ylo, yhi = max(ylo, 1e-3), max(yhi, ylo * 10)
            self.ylo, self.yhi = 10 ** math.floor(math.log10(ylo)), 10 ** math.ceil(math.log10(yhi))
        else:
            self.ylo, self.yhi = 0.0, yhi * 1.1 if yhi > 0 else 1.0
        self.title, self.ylabel, self.xlabel, self.xs = title, ylabel, xlabel, xs

    def px(self, v):
        return self.x + (math.log2(v) - self.xlo) / (self.xhi - self.xlo) * self.w

    def py(self, v):
        if self.ylog:
            f = (math.log10(max(v, self.ylo)) - math.log10(self.ylo)) / (math.log10(self.yhi) - math.log10(self.ylo))
        else:
            f = (v - self.ylo) / (self.yhi - self.ylo)
        return self.y + self.h - f * self.h

    def frame(self):
        s = [f'<rect x="{self.x}" y="{self.y}" width="{self.w}" height="{self.h}" fill="none" stroke="#444"/>',
             f'<text x="{self.x + self.w / 2}" y="{self.y - 8}" text-anchor="middle" font-size="13">{self.title}</text>',
             f'<text x="{self.x - 44}" y="{self.y + self.h / 2}" font-size="11" transform="rotate(-90 {self.x - 44} {self.y + self.h / 2})" text-anchor="middle">{self.ylabel}</text>']
        for c in self.xs:
            X = self.px(c)
            s.append(f'<line x1="{X}" y1="{self.y + self.h}" x2="{X}" y2="{self.y + self.h + 4}" stroke="#444"/>')
            s.append(f'<text x="{X}" y="{self.y + self.h + 16}" font-size="10" text-anchor="middle">{c}</text>')
        for t in nice_ticks(self.ylo, self.yhi, self.ylog):
            Y = self.py(t)
            s.append(f'<line x1="{self.x}" y1="{Y}" x2="{self.x + self.w}" y2="{Y}" stroke="#ddd"/>')
            label = f"{t:g}"
            s.append(f'<text x="{self.x - 4}" y="{Y + 3}" font-size="10" text-anchor="end">{label}</text>')
        s.append(f'<text x="{self.x + self.w / 2}" y="{self.y + self.h + 30}" font-size="11" text-anchor="middle">{self.xlabel}</text>')
        return s

    def line(self, pts, colour, dash=""):
        if not pts:
            return []
        d = " ".join(f"{self.px(a):.1f},{self.py(b):.1f}" for a, b in pts)
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        out = [f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="1.8"{extra}/>']
        out += [f'<circle cx="{self.px(a):.1f}" cy="{self.py(b):.1f}" r="2.5" fill="{colour}"/>' for a, b in pts]
        return out


def document(width, height, title, names, colours, step=130):
    """The opening of an SVG page: white background, a title and a legend of coloured names."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>']
    lx = 60
    for n in names:
        out.append(f'<rect x="{lx}" y="34" width="14" height="4" fill="{colours.get(n, "#000")}"/>')
        out.append(f'<text x="{lx + 18}" y="40" font-size="11">{n}</text>')
        lx += step
    return out
