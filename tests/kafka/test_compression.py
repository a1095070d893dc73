"""Compressed Kafka record batches (:mod:`sparklog.kafka.compression` through
:func:`sparklog.kafka.record_batch.decode_batch`): batches kafka-python compresses with each codec
decode to their records, and kafka-python reads back what :func:`compress` writes; the forms other
clients write (zstd and lz4 frames that declare no size, raw snappy, several gzip members or zstd
frames) read too; a small section that stands for far more than the limit (1 GiB of zeros) is a
:class:`RecordTooLarge` that costs a small part of that in memory; changed or cut compressed bytes
(their CRC made right again) are a :class:`CorruptRecord` naming the codec, never a library's own
exception; a codec number Kafka does not define is :class:`UnsupportedCompression`."""

from __future__ import annotations

import functools
import gc
import resource
import tracemalloc
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from sparklog.errors import CorruptRecord, RecordTooLarge, SparklogError, UnsupportedCompression
from sparklog.kafka import compression
from sparklog.kafka.compression import GZIP, LZ4, SNAPPY, ZSTD, compress, decompress
from sparklog.kafka.record_batch import HEADER, MAX_DECOMPRESSED_BYTES, BatchFields, decode_batch, encode_batch
from test_record_batch import T0, Record, _with_crc, as_tuples, kafka_python_batch, records_st, stored

CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
MiB = 1 << 20
GiB = 1 << 30
# a record that compresses well, so that kafka-python keeps a batch compressed whatever else it holds
# (it sends a batch uncompressed when compressing would not make it smaller)
COMPRESSIBLE: Record = (0, b"key", b"abcdefgh" * 500, [("h", b"v")])


def batch_around(section: bytes, codec: int, count: int = 1) -> bytes:
    """A v2 batch holding ``section`` as its (compressed) records section, CRC right."""
    header = HEADER.pack(0, HEADER.size - 12 + len(section), -1, 2, 0, codec, count - 1, T0, T0, -1, -1, -1, count)
    return _with_crc(bytearray(header + section))


def section_of(batch: bytes) -> bytes:
    return batch[HEADER.size :]


# ------------------------------------------------------------------------- what clients write reads
@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, gaps=st.integers(1, 3))
def test_batches_kafka_python_compresses_decode_to_their_records(codec: int, records: list[Record], gaps: int) -> None:
    records = [*records, COMPRESSIBLE]
    data = kafka_python_batch(records, base_offset=1000, gaps=gaps, compression=codec)
    decoded = decode_batch(data)
    assert decoded.header.compression == codec
    assert (decoded.header.base_offset, decoded.header.records_count) == (1000, len(records))
    assert as_tuples(decoded.records) == records
    assert decoded.records.column("offset_delta").to_pylist() == [i * gaps for i in range(len(records))]
    decoded.records.validate(full=True)


def _compressed_batch(records: list[Record], codec: int, squeeze: Callable[[bytes], bytes]) -> bytes:
    """Our uncompressed batch of ``records`` with its section recompressed by ``squeeze``."""
    plain = encode_batch(stored(records, 0), BatchFields(0))
    return batch_around(squeeze(section_of(plain)), codec, len(records))


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_kafka_python_reads_what_compress_writes(codec: int) -> None:
    records: list[Record] = [(i, b"k%d" % i, b"value %d " % i * 40, []) for i in range(500)]
    data = _compressed_batch(records, codec, functools.partial(compress, codec))
    read = DefaultRecordBatch(data)
    assert read.validate_crc() and read.compression_type == codec
    assert [(r.timestamp - T0, r.key, r.value, r.headers) for r in read] == records
    assert as_tuples(decode_batch(data).records) == records


def _zstd_streamed(data: bytes) -> bytes:
    """As zstd-jni streams it: one frame that declares no content size."""
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    return compressor.compress(data) + compressor.flush()


OTHER_FORMS: dict[str, tuple[int, Callable[[bytes], bytes]]] = {
    "zstd-no-size": (ZSTD, _zstd_streamed),
    "zstd-checksum": (ZSTD, zstandard.ZstdCompressor(write_checksum=True).compress),
    "zstd-two-frames": (ZSTD, lambda d: compress(ZSTD, d[: len(d) // 2]) + _zstd_streamed(d[len(d) // 2 :])),
    "zstd-skippable": (ZSTD, lambda d: b"\x50\x2a\x4d\x18\x03\x00\x00\x00abc" + compress(ZSTD, d)),
    "lz4-no-size": (LZ4, lambda d: lz4.frame.compress(d, block_linked=False, store_size=False)),
    "lz4-linked-checksums": (LZ4, lambda d: lz4.frame.compress(d, content_checksum=True, block_checksum=True)),
    "lz4-two-frames": (LZ4, lambda d: compress(LZ4, d[:100]) + compress(LZ4, d[100:])),
    "snappy-raw": (SNAPPY, lambda d: bytes(cramjam.snappy.compress_raw(d))),
    "snappy-xerial-twice": (SNAPPY, lambda d: compress(SNAPPY, d[:5000]) + compress(SNAPPY, d[5000:])),
    "gzip-two-members": (GZIP, lambda d: compress(GZIP, d[:7]) + compress(GZIP, d[7:])),
    "gzip-level-9": (GZIP, lambda d: zlib.compress(d, 9, wbits=31)),
    # many small parts: each is read in its turn, in time linear in the section
    "gzip-many-members": (GZIP, lambda d: _in_parts(d, functools.partial(compress, GZIP))),
    "lz4-many-frames": (LZ4, lambda d: _in_parts(d, functools.partial(compress, LZ4))),
    "zstd-many-frames": (ZSTD, lambda d: _in_parts(d, _zstd_streamed)),
    "snappy-small-blocks": (SNAPPY, lambda d: compression.XERIAL_HEADER + _in_parts(d, _snappy_block)),
}
KAFKA_PYTHON_READS_ONE_PART = {"snappy-xerial-twice", "lz4-two-frames", "lz4-many-frames"}  # it stops at the first


def _in_parts(data: bytes, squeeze: Callable[[bytes], bytes], size: int = 100) -> bytes:
    return b"".join(squeeze(data[at : at + size]) for at in range(0, len(data), size))


def _snappy_block(data: bytes) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(data))
    return len(block).to_bytes(4, "big") + block


@pytest.mark.parametrize("form", OTHER_FORMS.keys())
def test_what_other_clients_write_decodes(form: str) -> None:
    codec, squeeze = OTHER_FORMS[form]
    records: list[Record] = [(i, b"k%d" % i, b"value %d " % i * 60, []) for i in range(1000)]
    data = _compressed_batch(records, codec, squeeze)
    assert as_tuples(decode_batch(data).records) == records
    if form not in KAFKA_PYTHON_READS_ONE_PART:
        assert [(r.timestamp - T0, r.key, r.value, r.headers) for r in DefaultRecordBatch(data)] == records


@pytest.mark.parametrize("form", ["gzip", "snappy", "lz4", "zstd", *OTHER_FORMS])
def test_the_limit_is_exact(form: str) -> None:
    codec, squeeze = OTHER_FORMS.get(form) or (CODECS[form], functools.partial(compress, CODECS[form]))
    data = bytes(range(256)) * 5000 + b"tail"
    squeezed = squeeze(data)
    assert decompress(codec, squeezed, len(data)).to_pybytes() == data
    with pytest.raises(RecordTooLarge, match=f"compressed with {form.split('-')[0]} .* limit of {len(data) - 1} bytes"):
        decompress(codec, squeezed, len(data) - 1)
    with pytest.raises(RecordTooLarge, match="limit of 0 bytes"):
        decompress(codec, squeezed, 0)


def test_an_empty_section_round_trips() -> None:
    for codec in CODECS.values():
        assert decompress(codec, compress(codec, b""), 0).size == 0


# ------------------------------------------------------------------------------------------- bombs
def _streamed(size: int, begin: Callable[[], bytes], step: Callable[[bytes], bytes], end: Callable[[], bytes]) -> bytes:
    zeros = bytes(MiB)
    return begin() + b"".join(step(zeros) for _ in range(size // MiB)) + end()


def _gzip_bomb(size: int) -> bytes:
    """``size`` zeros (whole MiBs) as one gzip member: a raw deflate segment for 1 MiB (full flush:
    it stands alone) repeated, a final empty block, and the trailer (CRC-32 and size of the zeros)."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = deflater.compress(bytes(MiB)) + deflater.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    zeros = bytes(MiB)
    for _ in range(size // MiB):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    final = b"\x03\x00"  # a last block of fixed codes holding only its end
    return header + segment * (size // MiB) + final + crc.to_bytes(4, "little") + (size % 2**32).to_bytes(4, "little")


def _zstd_bomb(declared: bool, size: int) -> bytes:
    compressor = zstandard.ZstdCompressor(level=3).compressobj(size=size if declared else -1)
    return _streamed(size, lambda: b"", compressor.compress, compressor.flush)


def _lz4_bomb(declared: bool, size: int) -> bytes:
    compressor = lz4.frame.LZ4FrameCompressor(block_linked=False)
    return _streamed(size, lambda: compressor.begin(size if declared else 0), compressor.compress, compressor.flush)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _snappy_declared_bomb(size: int) -> bytes:
    """A raw snappy block that says it holds ``size`` bytes (and holds four literal bytes)."""
    return _varint(size) + b"\x0cabcd"


def _snappy_xerial_bomb(size: int) -> bytes:
    """Snappy-java's framing: 1 MiB of zeros as one real block, repeated (a snappy block holds at
    most about 21 times its size: a snappy bomb stands for its blocks' declared lengths)."""
    block = bytes(cramjam.snappy.compress_raw(bytes(MiB)))
    return compression.XERIAL_HEADER + (len(block).to_bytes(4, "big") + block) * (size // MiB)


BOMBS: dict[str, tuple[int, Callable[[int], bytes], int]] = {  # codec, its maker, what it stands for
    "gzip": (GZIP, _gzip_bomb, GiB),
    "zstd-declared": (ZSTD, functools.partial(_zstd_bomb, True), GiB),
    "zstd-streamed": (ZSTD, functools.partial(_zstd_bomb, False), GiB),
    "lz4-declared": (LZ4, functools.partial(_lz4_bomb, True), GiB),
    "lz4-streamed": (LZ4, functools.partial(_lz4_bomb, False), GiB),
    "snappy-raw-declared": (SNAPPY, _snappy_declared_bomb, GiB),
    "snappy-xerial": (SNAPPY, _snappy_xerial_bomb, 64 * MiB),
}
DECLARED = {"zstd-declared", "lz4-declared", "snappy-raw-declared", "snappy-xerial"}


@functools.cache
def bomb(name: str) -> bytes:
    codec, make, size = BOMBS[name]
    return make(size)


@pytest.mark.parametrize("name", BOMBS.keys())
def test_the_bombs_are_what_they_say(name: str) -> None:
    """Each bomb is small, and its maker makes real data (zeros) as a smaller bomb shows: the
    refusals below are of real data, not of broken data."""
    codec, make, size = BOMBS[name]
    assert len(bomb(name)) < size // 20  # snappy holds at most about 21 times its size
    small = make(32 * MiB)
    if name == "snappy-raw-declared":
        assert cramjam.snappy.decompress_raw_len(small) == 32 * MiB  # it only declares
    else:
        assert decompress(codec, small, 32 * MiB).to_pybytes() == bytes(32 * MiB)


def _memory_of(action: Callable[[], None]) -> tuple[int, int]:
    """(the peak of Python's traced allocations, the growth of the process's peak resident size)
    while ``action`` runs, in bytes."""
    gc.collect()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    tracemalloc.start()
    try:
        action()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before


@pytest.mark.parametrize("name", BOMBS.keys())
def test_a_bomb_is_refused_before_it_costs_what_it_stands_for(name: str) -> None:
    codec, _, _ = BOMBS[name]
    data = batch_around(bomb(name), codec)
    limit = 16 * MiB

    def refuse() -> None:
        with pytest.raises(RecordTooLarge, match=f"limit of {limit} bytes"):
            decode_batch(data, max_bytes=limit)

    traced, rss = _memory_of(refuse)
    assert traced < 100_000_000 and rss < 100_000_000, (traced, rss)
    if name in DECLARED:  # refused from what it declares: nothing decompressed, nothing allocated
        assert traced < MiB, traced


@pytest.mark.parametrize("name", sorted(n for n in DECLARED if BOMBS[n][2] > MAX_DECOMPRESSED_BYTES))
def test_the_default_limit_refuses_a_declared_bomb_at_once(name: str) -> None:
    codec, _, _ = BOMBS[name]
    data = batch_around(bomb(name), codec)
    traced, _ = _memory_of(lambda: pytest.raises(RecordTooLarge, decode_batch, data))
    assert traced < MiB
    with pytest.raises(RecordTooLarge, match=f"limit of {MAX_DECOMPRESSED_BYTES} bytes"):
        decode_batch(data)


def test_a_zstd_frame_that_needs_a_huge_window_is_refused() -> None:
    params = zstandard.ZstdCompressionParameters(window_log=31, enable_ldm=True)
    compressor = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = compressor.compress(b"abc" * 1000) + compressor.flush()  # declares a 2 GiB window
    with pytest.raises(CorruptRecord, match="zstd.*too much memory"):
        decode_batch(batch_around(frame, ZSTD))


# ------------------------------------------------------------------------------------ corrupt data
RECORDS: list[Record] = [(i, b"k%d" % i, b"value %d " % i * 30, [("h", b"%d" % i)]) for i in range(300)]


@functools.cache
def kafka_python_compressed(codec: int) -> bytes:
    data = kafka_python_batch(RECORDS, compression=codec)
    assert DefaultRecordBatch(data).compression_type == codec
    return data


def _replace_section(batch: bytes, section: bytes) -> bytes:
    data = bytearray(batch[: HEADER.size] + section)
    data[8:12] = (len(data) - 12).to_bytes(4, "big")
    return _with_crc(data)


@pytest.mark.parametrize("name", CODECS.keys())
def test_a_cut_compressed_section_is_corrupt_naming_the_codec(name: str) -> None:
    data = kafka_python_compressed(CODECS[name])
    section = section_of(data)
    for keep in (0, 1, 7, len(section) // 3, len(section) // 2, len(section) - 5, len(section) - 1):
        with pytest.raises(CorruptRecord, match=f"compressed with {name}"):
            decode_batch(_replace_section(data, section[:keep]))


@pytest.mark.parametrize("name", CODECS.keys())
def test_garbage_for_a_compressed_section_is_corrupt_naming_the_codec(name: str) -> None:
    data = kafka_python_compressed(CODECS[name])
    for garbage in (b"\x00" * 100, b"\xff" * 100, b"garbage" * 30, compression.XERIAL_MAGIC + b"\xff" * 40):
        with pytest.raises(CorruptRecord, match=f"compressed with {name}"):
            decode_batch(_replace_section(data, garbage))


@pytest.mark.parametrize("name", ["gzip", "zstd-checksum", "lz4-linked-checksums"])
def test_a_changed_byte_under_a_checksum_is_corrupt(name: str) -> None:
    """gzip always carries a CRC-32 of its content; zstd and lz4 frames may carry a checksum: any
    byte changed in their compressed data (the batch CRC made right again) is found."""
    codec, squeeze = (GZIP, functools.partial(compress, GZIP)) if name == "gzip" else OTHER_FORMS[name]
    data = _compressed_batch(RECORDS, codec, squeeze)
    section = section_of(data)
    start = 10 if codec == GZIP else 15  # after the header fields a reader may ignore (gzip's mtime, OS)
    for at in range(start, len(section), max(1, len(section) // 97)):
        changed = bytearray(section)
        changed[at] ^= 0x5A
        with pytest.raises(CorruptRecord, match=f"compressed with {name.split('-')[0]}"):
            decode_batch(_replace_section(data, bytes(changed)))


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 1 << 20)),
    limit=st.sampled_from([100, 30_000, MAX_DECOMPRESSED_BYTES]),
)
def test_changed_compressed_bytes_are_a_sparklog_error_or_valid_records(
    codec: int, flips: list[tuple[int, int]], cut: int | None, limit: int
) -> None:
    """Whatever the compressed bytes become (the CRC made right again): a CorruptRecord or a
    RecordTooLarge, or records that are valid Arrow data within the limit; never another exception."""
    section = bytearray(section_of(kafka_python_compressed(codec)))
    for at, value in flips:
        section[at % len(section)] = value
    if cut is not None:
        section = section[: cut % (len(section) + 1)]
    try:
        decoded = decode_batch(_replace_section(kafka_python_compressed(codec), bytes(section)), max_bytes=limit)
    except (CorruptRecord, RecordTooLarge):
        return
    decoded.records.validate(full=True)
    assert decoded.records.num_rows == len(RECORDS)


# ----------------------------------------------------------------------------------- unknown codecs
@pytest.mark.parametrize("codec", [5, 6, 7])
def test_a_codec_kafka_does_not_define_is_unsupported(codec: int) -> None:
    data = bytearray(kafka_python_batch([(0, b"k", b"v", [])]))
    data[22] = (data[22] & ~0x07) | codec  # the attributes' low byte
    with pytest.raises(UnsupportedCompression, match=f"codec {codec} is not one Kafka defines"):
        decode_batch(_with_crc(data))
    with pytest.raises(UnsupportedCompression):
        decompress(codec, b"anything", 100)
    with pytest.raises(UnsupportedCompression):
        compress(codec, b"anything")


def test_every_refusal_is_a_sparklog_error() -> None:
    for error in (CorruptRecord, RecordTooLarge, UnsupportedCompression):
        assert issubclass(error, SparklogError)
