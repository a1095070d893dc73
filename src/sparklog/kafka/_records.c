/* Kafka record batch v2: the records section, parsed into and written from columns.
 *
 * A record is: length (varint), attributes (int8), timestampDelta (varlong), offsetDelta (varint),
 * keyLength (varint, -1: null), key, valueLength (varint, -1: null), value, headersCount (varint),
 * then per header: keyLength (varint), key (a string, never null), valueLength (varint, -1: null),
 * value. Varints are zigzag-encoded base-128 (Kafka's ByteUtils). See Kafka's
 * clients/src/main/java/org/apache/kafka/common/record/DefaultRecord.java.
 *
 * Columns are (position, length) pairs into the section (length -1: null): the caller gathers
 * them into Arrow buffers (sl_gather) or, to write, points them into Arrow buffers. Built by `make`
 * into _records.so and loaded with ctypes (no Python API used here).
 */
#include <stdint.h>
#include <string.h>

enum {
    SL_OK = 0,
    SL_TRUNCATED = 1,       /* a varint or a field runs past the end */
    SL_BAD_LENGTH = 2,      /* a negative length other than -1, or one out of range */
    SL_LENGTH_MISMATCH = 3, /* a record's fields do not add up to its length */
    SL_HEADERS_FULL = 4,    /* more headers than the caller made room for */
    SL_TRAILING = 5,        /* bytes after the last record */
};

static int read_varlong(const uint8_t **p, const uint8_t *end, int64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= end) return 0;
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
            return 1;
        }
    }
    return 0;
}

static int read_varint(const uint8_t **p, const uint8_t *end, int32_t *out) {
    int64_t v;
    if (!read_varlong(p, end, &v) || v < INT32_MIN || v > INT32_MAX) return 0;
    *out = (int32_t)v;
    return 1;
}

/* A length-prefixed field: its position and length (-1: null, when allowed). */
static int read_field(const uint8_t **p, const uint8_t *base, const uint8_t *end, int nullable, int64_t *pos,
                      int32_t *len, int *err) {
    int32_t n;
    if (!read_varint(p, end, &n)) { *err = SL_TRUNCATED; return 0; }
    if (n < -1 || (n == -1 && !nullable)) { *err = SL_BAD_LENGTH; return 0; }
    *pos = *p - base;
    *len = n;
    if (n > 0) {
        if ((int64_t)(end - *p) < n) { *err = SL_TRUNCATED; return 0; }
        *p += n;
    }
    return 1;
}

/* Parse the `n` records of buf[0:size]. Returns the number parsed (n on success); on an error,
 * the index of the record at fault, with *err set. Headers fill hk_* / hv_* up to `hcap`. */
int64_t sl_parse_records(const uint8_t *buf, int64_t size, int64_t n, int64_t *ts_delta, int32_t *off_delta,
                         int64_t *key_pos, int32_t *key_len, int64_t *val_pos, int32_t *val_len,
                         int64_t *hdr_first, int32_t *hdr_count, int64_t hcap, int64_t *hk_pos, int32_t *hk_len,
                         int64_t *hv_pos, int32_t *hv_len, int64_t *hused, int *err) {
    const uint8_t *p = buf, *end = buf + size;
    int64_t h = 0;
    *err = SL_OK;
    for (int64_t i = 0; i < n; i++) {
        int32_t length, count;
        if (!read_varint(&p, end, &length)) { *err = SL_TRUNCATED; return i; }
        if (length < 0 || (int64_t)(end - p) < length) { *err = length < 0 ? SL_BAD_LENGTH : SL_TRUNCATED; return i; }
        const uint8_t *rec_end = p + length;
        if (p >= rec_end) { *err = SL_TRUNCATED; return i; }
        p++; /* attributes: unused in v2 records */
        if (!read_varlong(&p, rec_end, &ts_delta[i]) || !read_varint(&p, rec_end, &off_delta[i])) {
            *err = SL_TRUNCATED;
            return i;
        }
        if (!read_field(&p, buf, rec_end, 1, &key_pos[i], &key_len[i], err)) return i;
        if (!read_field(&p, buf, rec_end, 1, &val_pos[i], &val_len[i], err)) return i;
        if (!read_varint(&p, rec_end, &count)) { *err = SL_TRUNCATED; return i; }
        if (count < 0) { *err = SL_BAD_LENGTH; return i; }
        hdr_first[i] = h;
        hdr_count[i] = count;
        for (int32_t j = 0; j < count; j++) {
            if (h >= hcap) { *err = SL_HEADERS_FULL; return i; }
            if (!read_field(&p, buf, rec_end, 0, &hk_pos[h], &hk_len[h], err)) return i;
            if (!read_field(&p, buf, rec_end, 1, &hv_pos[h], &hv_len[h], err)) return i;
            h++;
        }
        if (p != rec_end) { *err = SL_LENGTH_MISMATCH; return i; }
    }
    *hused = h;
    if (p != end) { *err = SL_TRAILING; return n; }
    return n;
}

/* Copy the n slices buf[pos[i]:pos[i]+len[i]] (len -1: null, nothing) into out, one after the
 * other, writing out_offsets[0..n] (Arrow's int32 offsets). Returns the bytes written. */
int64_t sl_gather(const uint8_t *buf, int64_t n, const int64_t *pos, const int32_t *len, int32_t *out_offsets,
                  uint8_t *out) {
    int64_t at = 0;
    out_offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        if (len[i] > 0) {
            memcpy(out + at, buf + pos[i], (size_t)len[i]);
            at += len[i];
        }
        out_offsets[i + 1] = (int32_t)at;
    }
    return at;
}

static int varlong_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) { z >>= 7; n++; }
    return n;
}

static uint8_t *write_varlong(uint8_t *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) { *p++ = (uint8_t)(z | 0x80); z >>= 7; }
    *p++ = (uint8_t)z;
    return p;
}

static int64_t body_size(int64_t i, const int64_t *ts_delta, const int32_t *off_delta, const int32_t *key_len,
                         const int32_t *val_len, const int64_t *hdr_first, const int32_t *hdr_count,
                         const int32_t *hk_len, const int32_t *hv_len) {
    int64_t s = 1 + varlong_size(ts_delta[i]) + varlong_size(off_delta[i]);
    s += varlong_size(key_len[i]) + (key_len[i] > 0 ? key_len[i] : 0);
    s += varlong_size(val_len[i]) + (val_len[i] > 0 ? val_len[i] : 0);
    int32_t count = hdr_count ? hdr_count[i] : 0;
    s += varlong_size(count);
    for (int32_t j = 0; j < count; j++) {
        int64_t h = hdr_first[i] + j;
        s += varlong_size(hk_len[h]) + hk_len[h] + varlong_size(hv_len[h]) + (hv_len[h] > 0 ? hv_len[h] : 0);
    }
    return s;
}

/* The size of the records section sl_write_records writes. */
int64_t sl_records_size(int64_t n, const int64_t *ts_delta, const int32_t *off_delta, const int32_t *key_len,
                        const int32_t *val_len, const int64_t *hdr_first, const int32_t *hdr_count,
                        const int32_t *hk_len, const int32_t *hv_len) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t b = body_size(i, ts_delta, off_delta, key_len, val_len, hdr_first, hdr_count, hk_len, hv_len);
        total += varlong_size(b) + b;
    }
    return total;
}

/* Write n records into out (sl_records_size bytes). Keys, values and headers are slices of
 * key_data, val_data, hk_data and hv_data (length -1: null). Returns the bytes written. */
int64_t sl_write_records(int64_t n, const int64_t *ts_delta, const int32_t *off_delta, const uint8_t *key_data,
                         const int64_t *key_pos, const int32_t *key_len, const uint8_t *val_data,
                         const int64_t *val_pos, const int32_t *val_len, const int64_t *hdr_first,
                         const int32_t *hdr_count, const uint8_t *hk_data, const int64_t *hk_pos,
                         const int32_t *hk_len, const uint8_t *hv_data, const int64_t *hv_pos,
                         const int32_t *hv_len, uint8_t *out) {
    uint8_t *p = out;
    for (int64_t i = 0; i < n; i++) {
        p = write_varlong(p, body_size(i, ts_delta, off_delta, key_len, val_len, hdr_first, hdr_count, hk_len,
                                       hv_len));
        *p++ = 0; /* attributes */
        p = write_varlong(p, ts_delta[i]);
        p = write_varlong(p, off_delta[i]);
        p = write_varlong(p, key_len[i]);
        if (key_len[i] > 0) { memcpy(p, key_data + key_pos[i], (size_t)key_len[i]); p += key_len[i]; }
        p = write_varlong(p, val_len[i]);
        if (val_len[i] > 0) { memcpy(p, val_data + val_pos[i], (size_t)val_len[i]); p += val_len[i]; }
        int32_t count = hdr_count ? hdr_count[i] : 0;
        p = write_varlong(p, count);
        for (int32_t j = 0; j < count; j++) {
            int64_t h = hdr_first[i] + j;
            p = write_varlong(p, hk_len[h]);
            if (hk_len[h] > 0) { memcpy(p, hk_data + hk_pos[h], (size_t)hk_len[h]); p += hk_len[h]; }
            p = write_varlong(p, hv_len[h]);
            if (hv_len[h] > 0) { memcpy(p, hv_data + hv_pos[h], (size_t)hv_len[h]); p += hv_len[h]; }
        }
    }
    return p - out;
}
