#!/usr/bin/env python3
"""An independent implementation of JNF's roots (jnf/SPEC.md §4-5), written
from the specification alone with Python's standard library: it reads a JNF
directory's files (preambles, record tables, auxiliary files, record bytes),
re-hashes every byte range with SHA-256 and BLAKE3 (implemented below from the
BLAKE3 specification), rebuilds every leaf and both RFC 6962 roots, and prints
them as JSON. verify's TestIndependentRootVector compares its output with the
Go implementation's; the vector it printed is committed beside it.

usage: jnfroot.py DIR            print {"root", "weights_root", "leaves": [...]}
       jnfroot.py --blake3 FILE  print the BLAKE3 digest of FILE (self-test)
"""
import hashlib
import json
import os
import re
import struct
import sys

# ---- BLAKE3 (https://github.com/BLAKE3-team/BLAKE3-specs, §2) ----------------
IV = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19]
PERM = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8]
CHUNK_START, CHUNK_END, PARENT, ROOT = 1, 2, 4, 8
M32 = 0xFFFFFFFF


def _rotr(x, n):
    return ((x >> n) | (x << (32 - n))) & M32


def _g(s, a, b, c, d, x, y):
    s[a] = (s[a] + s[b] + x) & M32
    s[d] = _rotr(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & M32
    s[b] = _rotr(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b] + y) & M32
    s[d] = _rotr(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & M32
    s[b] = _rotr(s[b] ^ s[c], 7)


def _compress(cv, block, counter, block_len, flags):
    m = list(struct.unpack("<16I", block.ljust(64, b"\0")))
    s = cv[:8] + IV[:4] + [counter & M32, (counter >> 32) & M32, block_len, flags]
    for r in range(7):
        _g(s, 0, 4, 8, 12, m[0], m[1]); _g(s, 1, 5, 9, 13, m[2], m[3])
        _g(s, 2, 6, 10, 14, m[4], m[5]); _g(s, 3, 7, 11, 15, m[6], m[7])
        _g(s, 0, 5, 10, 15, m[8], m[9]); _g(s, 1, 6, 11, 12, m[10], m[11])
        _g(s, 2, 7, 8, 13, m[12], m[13]); _g(s, 3, 4, 9, 14, m[14], m[15])
        if r < 6:
            m = [m[p] for p in PERM]
    return [s[i] ^ s[i + 8] for i in range(8)] + [s[i + 8] ^ cv[i] for i in range(8)]


def _chunk_output(chunk, counter):
    """The (cv, block, counter, len, flags) of a chunk's last compression."""
    cv = IV[:]
    blocks = [chunk[i:i + 64] for i in range(0, len(chunk), 64)] or [b""]
    for i, blk in enumerate(blocks):
        flags = (CHUNK_START if i == 0 else 0) | (CHUNK_END if i == len(blocks) - 1 else 0)
        if i == len(blocks) - 1:
            return (cv, blk, counter, len(blk), flags)
        cv = _compress(cv, blk, counter, 64, flags)[:8]


def _subtree(data, first_chunk):
    """The last compression of the subtree over data (whole chunks but the last)."""
    n = max(1, (len(data) + 1023) // 1024)
    if n == 1:
        return _chunk_output(data, first_chunk)
    left = 1
    while left * 2 < n:
        left *= 2
    lo = _subtree(data[:left * 1024], first_chunk)
    hi = _subtree(data[left * 1024:], first_chunk + left)
    lcv = _compress(*lo)[:8]
    hcv = _compress(*hi)[:8]
    return (IV[:], struct.pack("<16I", *(lcv + hcv)), 0, 64, PARENT)


def blake3(data):
    cv, blk, counter, blen, flags = _subtree(data, 0)
    out = _compress(cv, blk, 0 if flags & PARENT else counter, blen, flags | ROOT)
    return struct.pack("<8I", *out[:8]).hex()


# ---- RFC 6962 Merkle tree (verify/doc.go) ------------------------------------
def leaf_hash(d):
    return hashlib.sha256(b"\x00" + d).digest()


def mth(hashes):
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(hashes[:k]) + mth(hashes[k:])).digest()


# ---- JNF ----------------------------------------------------------------------
AUX = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
       "special_tokens_map.json", "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json"]


def quote(s):
    """Go's strconv.Quote for the printable ASCII this vector uses (others: refuse)."""
    if any(ord(c) < 0x20 or ord(c) > 0x7E for c in s):
        raise SystemExit("quote: non-ASCII or control character in %r (not needed by the fixture)" % s)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def read_table(path):
    with open(path, "rb") as f:
        pre = f.read(64)
        if pre[:8] != b"TARFAJNF":
            raise SystemExit("%s: bad magic" % path)
        version, flags, toff, tlen = struct.unpack("<IIQQ", pre[8:32])
        if (version, flags, toff) != (1, 0, 64):
            raise SystemExit("%s: preamble" % path)
        tb = f.read(tlen)
        if hashlib.sha256(tb).digest() != pre[32:64]:
            raise SystemExit("%s: table digest" % path)
        return json.loads(tb)


def record_digests(path, rec):
    with open(path, "rb") as f:
        f.seek(rec["offset"])
        data = f.read(rec["length"])
    return hashlib.sha256(data).hexdigest(), blake3(data)


def shape(s):
    return "[" + ",".join(str(d) for d in s) + "]"


def content_leaf(kind, name, layout, length, sha, b3):
    return ("tarfa-jnf-v1 content\nkind=%s\nname=%s\nlayout=%s\nlength=%d\nsha256=%s\nblake3=%s\n"
            % (kind, name, layout, length, sha, b3))


def main(d):
    cfg_bytes = open(os.path.join(d, "config.json"), "rb").read()
    cfg = json.loads(cfg_bytes)
    layers = cfg.get("text_config", cfg)["num_hidden_layers"]
    full, content = [], []
    for name in sorted(a for a in AUX if os.path.exists(os.path.join(d, a))):
        data = open(os.path.join(d, name), "rb").read()
        leaf = content_leaf("file", name, "", len(data), hashlib.sha256(data).hexdigest(), blake3(data))
        full.append(leaf + "file=%s\noffset=0\nsource=\n" % name)
    files = ["global.jnf"] + ["layer-%05d.jnf" % l for l in range(layers)]
    present, sources, layout, ignored = [], {}, "", []
    for fname in files:
        path = os.path.join(d, fname)
        if not os.path.exists(path):
            continue
        t = read_table(path)
        if fname == "global.jnf":
            layout, ignored = t.get("layout", ""), t.get("ignored", [])
        else:
            present.append(t["layer"])
        for s in t["sources"]:
            sources[s["file"]] = s
        for r in t["records"]:
            sha, b3 = record_digests(path, r)
            if (sha, b3) != (r["sha256"], r["blake3"]):
                raise SystemExit("%s: %s: record bytes do not match the table" % (fname, r["name"]))
            if r["kind"] == "tensor":
                lay = r["dtype"] + shape(r["shape"])
                src = [r["source"][0]]
            else:
                lay = ";".join("%s:%s%s" % (p["name"], p["dtype"], shape(p["shape"])) for p in r["parts"])
                src = [p["source"] for p in r["parts"]]
            c = content_leaf(r["kind"], r["name"], lay, r["length"], sha, b3)
            content.append(c)
            full.append(c + "file=%s\noffset=%d\nsource=%s\n" % (
                fname, r["offset"], ";".join("%s:%d+%d" % (s["file"], s["offset"], s["length"]) for s in src)))
    complete = os.path.exists(os.path.join(d, "global.jnf")) and len(present) == layers
    arch = "qwen3_5_moe" if cfg["model_type"].startswith("qwen3_5_moe") else cfg["model_type"]
    man = "tarfa-jnf-v1 manifest\n"
    man += "arch=%s\nmodel_type=%s\nlayout=%s\n" % (quote(arch), quote(cfg["model_type"]), quote(layout))
    man += "layers=%d\nlayers_present=%s\ncomplete=%s\n" % (layers, ",".join(map(str, present)), "true" if complete else "false")
    man += "config_sha256=%s\nsources=%d\n" % (hashlib.sha256(cfg_bytes).hexdigest(), len(sources))
    for f in sorted(sources):
        man += "source=%s %d %s\n" % (f, sources[f]["size"], sources[f]["sha256"])
    man += "ignored=%d\n" % len(ignored)
    for ig in ignored:
        man += "ignored=%s %d %s\n" % (quote(ig["name"]), ig["bytes"], quote(ig["reason"]))
    leaves = [man] + full
    root = mth([leaf_hash(l.encode()) for l in leaves]).hex()
    weights = mth([leaf_hash(c.encode()) for c in content]).hex()
    json.dump({"root": root, "weights_root": weights, "leaves": leaves}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--blake3":
        print(blake3(open(sys.argv[2], "rb").read()))
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        raise SystemExit(__doc__)
