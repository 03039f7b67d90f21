#!/usr/bin/env bash
# Builds the training corpus of the default model (models/README.md) from a Debian package:
# r-cran-janeaustenr, Jane Austen's six completed novels (public domain; the package is MIT).
# The package keeps the novels as R character vectors (one Project Gutenberg line each) in an R
# lazy-load database (data/Rdata.rdx + .rdb); a small reader of R's XDR serialization below turns
# them into plain UTF-8 text, so R itself is not needed.
#
# Output (git-ignored), default .carry/corpus/:
#   train.txt    the novels minus their held-out tails, novels separated by <|endoftext|>
#   heldout.txt  the last 5% of each novel's paragraphs (never trained on)
#   SOURCE.txt   package, version, licence, sizes
# Paragraphs are unwrapped (the Gutenberg line breaks inside a paragraph become spaces) and
# separated by one blank line. Deterministic: the same package gives the same bytes.
#
# usage: scripts/make_corpus.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.carry/corpus}
PKG=r-cran-janeaustenr
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

(cd "$WORK" && apt-get download "$PKG" >/dev/null 2>&1) || {
    apt-get update >/dev/null && (cd "$WORK" && apt-get download "$PKG")
}
DEB=$(ls "$WORK"/*.deb)
dpkg -x "$DEB" "$WORK/x"
VERSION=$(dpkg-deb -f "$DEB" Version)
mkdir -p "$OUT"

python3 - "$WORK/x/usr/lib/R/site-library/janeaustenr" "$OUT" "$PKG" "$VERSION" <<'PY'
import bz2, gzip, lzma, os, struct, sys, zlib

lib, out, pkg, version = sys.argv[1:5]

class RReader:
    """R serialization format 2/3, XDR ('X\\n'), the subset data objects use."""
    def __init__(self, data):
        self.d, self.p, self.refs = data, 0, []
        if self.d[:2] != b"X\n":
            raise SystemExit("not an XDR R serialization")
        self.p = 2
        ver = self.int(); self.int(); self.int()
        if ver == 3:
            n = self.int(); self.p += n  # native encoding
    def int(self):
        v = struct.unpack_from(">i", self.d, self.p)[0]; self.p += 4; return v
    def item(self):
        flags = self.int()
        t, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if t == 254: return None                          # NILVALUE
        if t in (242, 241, 253, 251, 252, 250): return None  # environments, markers
        if t == 255:                                      # REFSXP
            i = flags >> 8
            return self.refs[(i if i else self.int()) - 1]
        if t == 1:                                        # SYMSXP
            s = self.item(); self.refs.append(s); return s
        if t == 9:                                        # CHARSXP
            n = self.int()
            if n == -1: return None
            s = self.d[self.p:self.p + n].decode("utf-8" if not flags & (1 << 2) else "latin-1")
            self.p += n; return s
        if t in (2, 239):                                 # LISTSXP (pairlist) -> dict
            out = {}
            while True:
                attr = self.item() if has_attr else None
                tag = self.item() if has_tag else None
                out[tag] = self.item()
                nxt = self.int(); t2 = nxt & 0xFF
                if t2 == 254: return out
                has_attr, has_tag = nxt & (1 << 9), nxt & (1 << 10)
        if t in (10, 13):                                 # LGLSXP, INTSXP
            n = self.int(); v = list(struct.unpack_from(">%di" % n, self.d, self.p)); self.p += 4 * n
        elif t == 14:                                     # REALSXP
            n = self.int(); v = list(struct.unpack_from(">%dd" % n, self.d, self.p)); self.p += 8 * n
        elif t in (16, 19, 20):                           # STRSXP, VECSXP, EXPRSXP
            n = self.int(); v = [self.item() for _ in range(n)]
        else:
            raise SystemExit("R type %d not handled" % t)
        if has_attr:
            attrs = self.item()
            if attrs and "names" in attrs:
                return dict(zip(attrs["names"], v))
        return v

def blob(rdb, off, n):
    b = rdb[off:off + n]
    size = struct.unpack(">I", b[:4])[0]
    kind = b[4:5]
    if kind == b"Z": raw = lzma.decompress(b[5:])
    elif kind == b"2": raw = bz2.decompress(b[5:])
    elif kind == b"0": raw = b[5:]
    else: raw = zlib.decompress(b[4:])
    assert len(raw) == size
    return raw

index = RReader(gzip.decompress(open(os.path.join(lib, "data/Rdata.rdx"), "rb").read())).item()
rdb = open(os.path.join(lib, "data/Rdata.rdb"), "rb").read()
books = [("sensesensibility", "Sense and Sensibility"), ("prideprejudice", "Pride and Prejudice"),
         ("mansfieldpark", "Mansfield Park"), ("emma", "Emma"),
         ("northangerabbey", "Northanger Abbey"), ("persuasion", "Persuasion")]
train, held, stats = [], [], []
for key, title in books:
    off, n = index["variables"][key]
    lines = RReader(blob(rdb, off, n)).item()
    paras, cur = [], []
    for line in lines + [""]:
        line = (line or "").strip()
        if line: cur.append(line)
        elif cur: paras.append(" ".join(cur)); cur = []
    cut = len(paras) - max(1, len(paras) // 20)
    train.append("\n\n".join(paras[:cut]) + "\n")
    held.append("\n\n".join(paras[cut:]) + "\n")
    stats.append("%-22s %6d lines %5d paragraphs, %5d held out" % (title, len(lines), len(paras), len(paras) - cut))
t = "<|endoftext|>".join(train)
h = "<|endoftext|>".join(held)
open(os.path.join(out, "train.txt"), "w", encoding="utf-8").write(t)
open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8").write(h)
with open(os.path.join(out, "SOURCE.txt"), "w", encoding="utf-8") as f:
    f.write("package: %s %s (Debian), janeaustenr by Julia Silge, MIT; texts public domain\n" % (pkg, version))
    f.write("\n".join(stats) + "\n")
    f.write("train.txt %d bytes, heldout.txt %d bytes\n" % (len(t.encode()), len(h.encode())))
print(open(os.path.join(out, "SOURCE.txt")).read(), end="")
PY
