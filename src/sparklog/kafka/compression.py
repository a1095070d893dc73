"""Kafka's record batch compression codecs (the attributes' low 3 bits), bounded on the way in.

A compressed v2 batch compresses its whole records section (everything after the 61-byte header)
with one codec: 1 gzip, 2 snappy, 3 lz4, 4 zstd. What arrives is a few bytes that may stand for
far more, so :func:`decompress` takes a limit and never produces more than it: it refuses with
:class:`RecordTooLarge` as soon as the output would pass the limit, from a size the data declares
(snappy's block lengths, a zstd or lz4 frame's content size) before decompressing it, otherwise
while decompressing in steps of at most :data:`CHUNK` bytes. A small bomb that stands for
gigabytes costs memory in proportion to the limit (up to about twice it, while a codec's output is
copied into one buffer), never what it stands for. Corrupt or cut data is a :class:`CorruptRecord`
naming the codec, never a library's own exception; a codec number Kafka does not define is
:class:`UnsupportedCompression`.

The formats are those Kafka's clients write:

* gzip: a gzip stream (Java's ``GZIPOutputStream``); concatenated gzip members are read in turn,
  as Java's ``GZIPInputStream`` reads them.
* snappy: Java's clients write snappy-java's framing ("xerial": the magic ``\\x82SNAPPY\\x00``, two
  big-endian int32s version and compatible version, then blocks of a big-endian int32 length and a
  raw snappy block); librdkafka and others may write one raw snappy block. Both are read. A raw
  block starts with its uncompressed length as a varint: the lengths are added up and checked
  against the limit before one byte is decompressed, and each block is decompressed into its place
  in one output buffer.
* lz4: the LZ4 frame format (Kafka's ``KafkaLZ4BlockOutputStream``, independent blocks).
* zstd: zstd frames (zstd-jni's streaming output declares no content size, librdkafka's and
  kafka-python's do). The frames' block headers are walked first (a Python step per block, a
  block holding up to 128 KiB) because zstandard's streaming reader takes a cut frame for its end
  without a word. A frame that needs a window over libzstd's default bound (128 MiB) is refused by
  libzstd: :class:`CorruptRecord`.

:func:`compress` writes each format in a form every Kafka client reads (for tests, and for writing
compressed batches).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import cramjam
import lz4.frame
import numpy as np
import pyarrow as pa
import zstandard

from sparklog.errors import CorruptRecord, RecordTooLarge, UnsupportedCompression

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

CHUNK = 1 << 20  # the most bytes asked of a codec in one step when the data declares no size that fits
# compressed bytes given to zlib or lz4 in one step after a first gzip member or lz4 frame (given
# the whole section): from the first to the most, doubling, for each member or frame, so that what
# they copy of the input past a member's or frame's end stays small, however many there are
FIRST_INPUT_STEP, INPUT_STEP = 1 << 12, 1 << 18

Data = bytes | bytearray | memoryview | pa.Buffer

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")  # version 1, compatible 1
XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size (uncompressed bytes per block)

_GZIP_WBITS = 31  # zlib's window bits for a gzip header and trailer
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # the 16 skippable frames' magic numbers, low 4 bits masked
_ZSTD_UNKNOWN_SIZE = zstandard.CONTENTSIZE_UNKNOWN


def decompress(codec: int, data: Data, limit: int) -> pa.Buffer:
    """A records section compressed with ``codec`` (the attributes' low 3 bits), decompressed into
    at most ``limit`` bytes: :class:`RecordTooLarge` past it, :class:`CorruptRecord` for data the
    codec cannot read, :class:`UnsupportedCompression` for a codec Kafka does not define. Codec 0
    (none) is the data itself, within the same limit."""
    if limit < 0:
        raise ValueError(f"a decompression limit cannot be negative ({limit})")
    view = memoryview(data).cast("B")  # a pa.Buffer's format is "b": compare and slice bytes
    if codec == NONE:
        _Output(NONE, limit).check(len(view))
        return data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    if codec == GZIP:
        return _gunzip(view, limit)
    if codec == SNAPPY:
        return _unsnappy(view, limit)
    if codec == LZ4:
        return _unlz4(view, limit)
    if codec == ZSTD:
        return _unzstd(view, limit)
    raise UnsupportedCompression(
        f"record batch compression codec {codec} is not one Kafka defines (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)"
    )


def compress(codec: int, data: Data) -> bytes:
    """``data`` compressed with ``codec`` in a form every Kafka client reads: gzip at the default
    level and snappy in snappy-java's framing with 32 KiB blocks (as Java's client writes them), an
    lz4 frame of independent 64 KiB blocks and one zstd frame at level 3, each declaring its content
    size (as kafka-python and librdkafka write them)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        compressor = zlib.compressobj(wbits=_GZIP_WBITS)
        return compressor.compress(data) + compressor.flush()
    if codec == SNAPPY:
        view = memoryview(data).cast("B")
        parts = [XERIAL_HEADER]
        for at in range(0, len(view), XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[at : at + XERIAL_BLOCK]))
            parts += [len(block).to_bytes(4, "big"), block]
        return b"".join(parts)
    if codec == LZ4:
        return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise UnsupportedCompression(f"record batch compression codec {codec} is not one Kafka defines")


class _Output:
    """The decompressed bytes so far, which may never pass ``limit``: the first chunk as the codec
    returned it (a section asked for at the size it declares is one chunk: no copy), more chunks
    gathered in one growing buffer."""

    def __init__(self, codec: int, limit: int) -> None:
        self.name = NAMES[codec]
        self.limit = limit
        self.first: bytes | None = None
        self.rest = bytearray()
        self.size = 0

    def want(self, hint: int = 0) -> int:
        """How much to ask the codec for next: ``hint`` bytes (what the data says it holds) when
        they fit, else :data:`CHUNK`; one byte more, which shows the limit is passed."""
        room = self.limit - self.size
        return (hint if 0 < hint <= room else min(CHUNK, room)) + 1

    def check(self, size: int, declared: bool = False) -> None:
        """:class:`RecordTooLarge` if ``size`` more bytes (or bytes declared) would pass the limit."""
        if self.size + size > self.limit:
            total = self.size + size
            if self.name == NAMES[NONE]:
                what = f"an uncompressed records section of {total} bytes is"
            else:
                said = "declares" if declared else "decompresses to at least"
                what = f"a records section compressed with {self.name} {said} {total} bytes,"
            raise RecordTooLarge(f"{what} more than the limit of {self.limit} bytes")

    def add(self, chunk: bytes) -> None:
        self.check(len(chunk))
        if not chunk:
            return
        if self.first is None and not self.size:
            self.first = chunk
        else:
            if self.first is not None:
                self.rest += self.first
                self.first = None
            self.rest += chunk
        self.size += len(chunk)

    def result(self) -> pa.Buffer:
        return pa.py_buffer(self.first if self.first is not None else self.rest)

    def corrupt(self, what: object) -> CorruptRecord:
        return CorruptRecord(f"a records section compressed with {self.name} is corrupt: {what}")


# -------------------------------------------------------------------------------------------- gzip
def _gunzip(view: memoryview, limit: int) -> pa.Buffer:
    out = _Output(GZIP, limit)
    # the last member's size (mod 2**32, as its trailer says): a first guess of the size, not trusted
    hint = int.from_bytes(view[-4:], "little") if len(view) >= 18 else 0
    inflater = zlib.decompressobj(_GZIP_WBITS)
    at, step = 0, len(view)
    tail: bytes | memoryview = b""
    try:
        while True:
            if not tail:
                tail = view[at : at + step]
                at, step = at + len(tail), min(2 * step, INPUT_STEP)
            want = out.want(hint)
            hint = 0
            chunk = inflater.decompress(tail, want)
            out.add(chunk)
            tail = inflater.unconsumed_tail
            if inflater.eof:
                at -= len(inflater.unused_data)  # input given past the member's end
                if at == len(view):
                    return out.result()
                inflater, tail, step = zlib.decompressobj(_GZIP_WBITS), b"", FIRST_INPUT_STEP  # another member
            elif not tail and at == len(view) and len(chunk) < want:  # all read, nothing held back, no end
                raise out.corrupt("the gzip stream is cut short")
    except zlib.error as exc:
        raise out.corrupt(exc) from None


# ------------------------------------------------------------------------------------------ snappy
def _unsnappy(view: memoryview, limit: int) -> pa.Buffer:
    out = _Output(SNAPPY, limit)
    declared = 0
    for block in _snappy_blocks(view, out):  # first their declared lengths, against the limit
        try:
            declared += cramjam.snappy.decompress_raw_len(block)
        except cramjam.DecompressionError as exc:
            raise out.corrupt(exc) from None
        out.check(declared, declared=True)
    result = np.empty(declared, np.uint8)  # allocated once, at the declared size
    target = memoryview(result)
    at = 0
    for block in _snappy_blocks(view, out):  # then each into its place
        try:
            size = cramjam.snappy.decompress_raw_len(block)
            written = cramjam.snappy.decompress_raw_into(block, target[at : at + size])
        except cramjam.DecompressionError as exc:
            raise out.corrupt(exc) from None
        if written != size:
            raise out.corrupt(f"a block declared {size} bytes and held {written}")
        at += size
    return pa.py_buffer(result)


def _snappy_blocks(view: memoryview, out: _Output) -> Iterator[memoryview]:
    """The raw snappy blocks of a section: those of snappy-java's framing, else the section itself."""
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC or len(view) < len(XERIAL_HEADER):
        yield view
        return
    at = len(XERIAL_HEADER)  # version and compatible version: not checked, as Kafka's clients do not
    while at < len(view):
        if view[at : at + len(XERIAL_MAGIC)] == XERIAL_MAGIC and len(view) - at >= len(XERIAL_HEADER):
            at += len(XERIAL_HEADER)  # a concatenated stream's header (a block's length is never negative)
            continue
        if len(view) - at < 4:
            raise out.corrupt(f"a block length is cut short at byte {at}")
        size = int.from_bytes(view[at : at + 4], "big", signed=True)
        at += 4
        if size <= 0 or size > len(view) - at:
            raise out.corrupt(f"a block of {size} bytes at byte {at - 4} does not fit the {len(view)} bytes")
        yield view[at : at + size]
        at += size


# --------------------------------------------------------------------------------------------- lz4
def _unlz4(view: memoryview, limit: int) -> pa.Buffer:
    out = _Output(LZ4, limit)
    at, step = 0, len(view)
    try:
        while True:  # a frame at a time
            declared = lz4.frame.get_frame_info(view[at:])["content_size"]  # 0: not declared
            out.check(declared, declared=True)
            decompressor = lz4.frame.LZ4FrameDecompressor()
            hint = declared  # a first request of the declared size (a frame that lies goes on in chunks)
            while not decompressor.eof:
                if decompressor.needs_input:
                    if at == len(view):
                        raise out.corrupt("the lz4 frame is cut short")
                    piece = view[at : at + step]
                    at, step = at + len(piece), min(2 * step, INPUT_STEP)
                else:
                    piece = b""  # it holds output back, and the input it has not consumed
                chunk = decompressor.decompress(piece, max_length=out.want(hint))
                if not piece and not chunk and not decompressor.eof:
                    raise out.corrupt("the lz4 frame makes no progress")
                out.add(chunk)
                hint = 0
            at -= len(decompressor.unused_data or b"")  # input given past the frame's end
            if at == len(view):
                return out.result()
            step = FIRST_INPUT_STEP  # another frame follows
    except RuntimeError as exc:  # lz4.frame's one error type
        raise out.corrupt(exc) from None


# -------------------------------------------------------------------------------------------- zstd
def _unzstd(view: memoryview, limit: int) -> pa.Buffer:
    out = _Output(ZSTD, limit)
    frames, declared = _zstd_frames(view, out)
    decompressor = zstandard.ZstdDecompressor()
    try:
        if frames == 1 and declared:
            # one frame (nothing else) of a declared size within the limit: decompressed at once
            # into exactly that many bytes
            return pa.py_buffer(decompressor.decompress(view, allow_extra_data=False))
        reader = decompressor.stream_reader(view, read_across_frames=True)
        while chunk := reader.read(out.want()):
            out.add(chunk)
    except zstandard.ZstdError as exc:
        raise out.corrupt(exc) from None
    return out.result()


def _zstd_frames(view: memoryview, out: _Output) -> tuple[int, int | None]:
    """How many frames (skippable ones too) and their declared content size in all (None: a frame
    declares none), every frame checked to be whole; :class:`RecordTooLarge` as soon as the declared
    sizes pass the limit."""
    at, frames, data_frames, declared, unknown = 0, 0, 0, 0, False
    end = len(view)
    while at < end:
        if end - at < 8:
            raise out.corrupt(f"a frame is cut short at byte {at}")
        magic = int.from_bytes(view[at : at + 4], "little")
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            at += 8 + int.from_bytes(view[at + 4 : at + 8], "little")
            if at > end:
                raise out.corrupt("a skippable frame runs past the end")
            frames += 1
            continue
        if magic != _ZSTD_MAGIC:
            raise out.corrupt(f"no zstd frame at byte {at} (magic {magic:#010x})")
        try:
            params = zstandard.get_frame_parameters(view[at:])
            at += zstandard.frame_header_size(view[at:])
        except zstandard.ZstdError as exc:
            raise out.corrupt(exc) from None
        if params.content_size == _ZSTD_UNKNOWN_SIZE:
            unknown = True
        else:
            declared += params.content_size
            out.check(declared, declared=True)
        last = False
        while not last:  # the blocks: a 3-byte little-endian header, then the block's bytes
            if end - at < 3:
                raise out.corrupt(f"a block header is cut short at byte {at}")
            header = int.from_bytes(view[at : at + 3], "little")
            last, kind, size = bool(header & 1), (header >> 1) & 3, header >> 3
            if kind == 3:
                raise out.corrupt(f"a block at byte {at} has the reserved type")
            at += 3 + (1 if kind == 1 else size)  # an RLE block holds one byte
            if at > end:
                raise out.corrupt("a block runs past the end")
        at += 4 if params.has_checksum else 0
        if at > end:
            raise out.corrupt("a frame's checksum is cut short")
        frames += 1
        data_frames += 1
    if not data_frames:
        raise out.corrupt("it holds no zstd frame")
    return frames, None if unknown else declared
