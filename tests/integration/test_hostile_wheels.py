#!/usr/bin/env python3
"""`wheelhouse check` of hostile wheels stays under 256 MiB of memory: a ~1 MB wheel whose
shared object declares 100 bytes and inflates to 768 MiB (refused, naming the member), one that
declares its 768 MiB honestly (read in pieces, never held whole), and ELF files whose symbol
tables are as large as the ELF limits allow, or whose many symbols all name one long string.
The peak resident size of the real binary is measured with wait4(); each run is also held
under an address-space limit so that a regression fails the test, not the machine."""
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("WHFS_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BUILD_DIR = os.environ.get("WHFS_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))
WHEELHOUSE = os.path.join(BUILD_DIR, "tools", "wheelhouse")
TARGET = "sm90-torch2.9-cu128-cp312"
MiB = 1 << 20
PEAK_LIMIT = 256 * MiB
SAFETY_AS = 4 << 30  # address space of each run: a regression fails, it does not swap


def write_zip(path, members):
    """A zip of deflated members: (name, chunks, declared) with `chunks` an iterable of bytes
    and `declared` the uncompressed size the headers give (None: the real one)."""
    central = []
    with open(path, "wb") as f:
        for name, chunks, declared in members:
            at = f.tell()
            raw = name.encode()
            f.write(b"\0" * (30 + len(raw)))  # the local header, written once sizes are known
            comp = zlib.compressobj(9, zlib.DEFLATED, -15)
            crc = size = csize = 0
            for chunk in chunks:
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
                out = comp.compress(chunk)
                csize += len(out)
                f.write(out)
            out = comp.flush()
            csize += len(out)
            f.write(out)
            end = f.tell()
            stated = size if declared is None else declared
            f.seek(at)
            f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, csize, stated,
                                len(raw), 0) + raw)
            f.seek(end)
            central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc,
                                       csize, stated, len(raw), 0, 0, 0, 0, 0, at) + raw)
        cd_at = f.tell()
        cd = b"".join(central)
        f.write(cd)
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central), len(cd),
                            cd_at, 0))


def zeros(total, chunk=MiB):
    block = bytes(chunk)
    while total > 0:
        n = min(chunk, total)
        yield block[:n]
        total -= n


def laid_out(total, pieces, chunk=MiB):
    """`total` bytes, zero but for `pieces` {offset: bytes}, a chunk at a time."""
    placed = sorted(pieces.items())
    for start in range(0, total, chunk):
        buf = bytearray(min(chunk, total - start))
        for off, data in placed:
            lo, hi = max(off, start), min(off + len(data), start + len(buf))
            if lo < hi:
                buf[lo - start:hi - start] = data[lo - off:hi - off]
        yield bytes(buf)


def elf(total, sections, strtab_index=1):
    """An ELF64 shared object of `total` bytes: `sections` [(name, type, offset, data, link)]
    after the null one, .shstrtab made here at its given offset, the section table at the end."""
    names = b"\0"
    name_at = []
    for name, *_ in sections:
        name_at.append(len(names))
        names += name.encode() + b"\0"
    shoff = total - 64 * (len(sections) + 1)
    pieces = {}
    table = bytes(64)
    for (name, kind, off, data, link), at in zip(sections, name_at):
        if name == ".shstrtab":
            data = names
        pieces[off] = data
        table += struct.pack("<IIQQQQIIQQ", at, kind, 0, 0, off, len(data), link, 0, 1, 0)
    pieces[shoff] = table
    head = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, 62, 1, 0, 0,
                       shoff, 0, 64, 0, 0, 64, len(sections) + 1, strtab_index)
    pieces[0] = head
    return laid_out(total, pieces)


def symbols(name_offsets):
    """.dynsym: the null symbol, then one defined global function per name offset."""
    out = bytearray(24 * (len(name_offsets) + 1))
    for i, at in enumerate(name_offsets, 1):
        struct.pack_into("<IBBHQQ", out, 24 * i, at, 0x12, 0, 1, 0, 0)
    return bytes(out)


def run_measured(argv):
    """(exit code, stdout, stderr, peak resident bytes) of argv, a process of its own."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (SAFETY_AS, SAFETY_AS))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err, preexec_fn=limit)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (p.returncode, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"), usage.ru_maxrss * 1024)


class HostileWheels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="whfs-hostile-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check(self, dist, members):
        wheel = os.path.join(self.tmp, f"{dist}-1.0-py3-none-any.whl")
        write_zip(wheel, members)
        code, out, err, peak = run_measured([WHEELHOUSE, "check", "--target", TARGET, wheel])
        print(f"{dist}: {os.path.getsize(wheel)} bytes, exit {code}, peak "
              f"{peak / MiB:.1f} MiB", file=sys.stderr)
        self.assertLess(peak, PEAK_LIMIT, out + err)
        return code, out, err

    def test_a_member_that_inflates_past_its_declared_size_is_refused(self):
        code, out, err = self.check("liar", [("liar/_C.so", zeros(768 * MiB), 100)])
        self.assertEqual(code, 1, out + err)
        self.assertIn("liar/_C.so: its compressed data gives more than the 100 bytes it declares",
                      err)

    def test_a_large_object_is_read_in_pieces(self):
        # 768 MiB declared honestly, its section table at the end and its tables in between:
        # read from restart points, never held whole.
        size = 768 * MiB
        so = elf(size, [(".shstrtab", 3, 400 * MiB, b"", 0),
                        (".dynsym", 11, 200 * MiB, symbols([1]), 3),
                        (".dynstr", 3, 600 * MiB, b"\0deep_in_the_object\0", 0)])
        code, out, err = self.check("honest", [("honest/_C.so", so, None)])
        self.assertEqual(code, 0, out + err)
        self.assertIn("verdict: runs on", out)
        self.assertNotIn("not an ELF file", out)

    def test_many_symbols_naming_one_long_string_are_refused(self):
        # 2^20 symbols that all name one 4 KiB string would be 4 GiB of names.
        table = symbols([1] * ((1 << 20) - 1))
        so = elf(len(table) + 2 * MiB,
                 [(".shstrtab", 3, 4096, b"", 0), (".dynsym", 11, MiB, table, 3),
                  (".dynstr", 3, 8192, b"\0" + b"n" * 4096 + b"\0", 0)])
        code, out, err = self.check("amplified", [("amplified/_C.so", so, None)])
        self.assertIn("symbol names of over 67108864 bytes in all", out + err)

    def test_symbol_tables_as_large_as_the_limits_allow(self):
        # 2^20 symbols of distinct 62-byte names: a 63 MiB .dynstr and 62 MiB of names, all
        # read (each is under its limit).
        count = (1 << 20) - 1
        strings = b"\0" + b"".join(b"s%061d\0" % i for i in range(count))
        table = symbols([1 + 63 * i for i in range(count)])
        so = elf(len(strings) + len(table) + 2 * MiB,
                 [(".shstrtab", 3, 4096, b"", 0), (".dynsym", 11, MiB, table, 3),
                  (".dynstr", 3, MiB + len(table), strings, 0)])
        code, out, err = self.check("widest", [("widest/_C.so", so, None)])
        self.assertEqual(code, 0, out + err)
        self.assertIn("verdict: runs on", out)


if __name__ == "__main__":
    if not os.path.exists(WHEELHOUSE):
        sys.exit(f"{WHEELHOUSE} is not built")
    unittest.main(verbosity=2)
