/* The fast reader of a spend-log CSV export (PostgreSQL's COPY ... CSV HEADER dialect), for csvscan.py.
 *
 * DuckDB defines what a file means: this reader only takes the well-formed subset of files it can read
 * to the same figures, faster, and stops with a reason at the first line outside it; the caller then
 * reads the whole file with DuckDB instead. So nothing here decides a doubtful case: a line with the
 * wrong number of fields, a stray quote, a time or a token count outside the plain forms PostgreSQL
 * writes, metadata that is not a plain JSON object, or text that is not UTF-8 in a field DuckDB would
 * read, all stop the scan.
 *
 * Per line it gives the numbers (times in microseconds since 1970 UTC, token counts, INT64_MIN where
 * empty), the line's offset, and one 64-bit hash of the raw bytes of every text the report groups by
 * (the model and client fields, and the six metadata values). Equal bytes read as equal text, so rows
 * with one hash have one meaning; the caller reads that meaning from one of its lines through DuckDB.
 * No allocation, no global state; one call per part of the file, in parallel threads (ctypes releases
 * the GIL).
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MISSING INT64_MIN
#define MAX_SLOTS 64
#define MAX_JSON_DEPTH 64
#define MAX_KEYS 16

/* What the caller asks of each field (slot_of_field), by the field's position in the line. */
enum { SLOT_IGNORED = -1, SLOT_START = 0, SLOT_END, SLOT_PROMPT, SLOT_COMPLETION, SLOT_METADATA, SLOT_CHECKED,
       SLOT_FIRST_HASHED };

/* Why a scan returned; csvscan.py names them. */
enum { SCAN_DONE = 0, SCAN_FULL, SCAN_FIELD_COUNT, SCAN_QUOTES, SCAN_NUMBER, SCAN_TIME, SCAN_JSON, SCAN_UTF8 };

typedef struct {
    const uint8_t *begin; /* the raw field, its quotes included */
    const uint8_t *end;
    int quoted;
} field_t;

/* ------------------------------------------------------------------------------------------ hashing */

static inline uint64_t rotate_left(uint64_t value, int bits) { return (value << bits) | (value >> (64 - bits)); }

static inline uint64_t finish(uint64_t value) {
    value ^= value >> 33;
    value *= 0xff51afd7ed558ccdULL;
    value ^= value >> 33;
    value *= 0xc4ceb9fe1a85ec53ULL;
    return value ^ (value >> 33);
}

static uint64_t hash_bytes(const uint8_t *bytes, size_t length, uint64_t seed) {
    size_t whole = length;
    uint64_t hash = finish(seed + 0x9e3779b97f4a7c15ULL) ^ (length * 0x87c37b91114253d5ULL);
    while (length >= 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        hash = rotate_left((hash ^ word) * 0x87c37b91114253d5ULL, 31);
        bytes += 8;
        length -= 8;
    }
    /* The last bytes, read as one word where the text is long enough (overlapping the words before). */
    uint64_t tail = 0;
    if (length && whole >= 8) {
        memcpy(&tail, bytes + length - 8, 8);
    } else {
        for (size_t index = 0; index < length; index++) tail |= (uint64_t)bytes[index] << (8 * index);
    }
    return finish(hash ^ tail ^ (length << 56));
}

/* ------------------------------------------------------------------------------------------- UTF-8 */

static int has_high_bytes(const uint8_t *bytes, const uint8_t *end) {
    uint64_t seen = 0;
    for (; bytes + 8 <= end; bytes += 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        seen |= word;
    }
    for (; bytes < end; bytes++) seen |= *bytes;
    return (seen & 0x8080808080808080ULL) != 0;
}

/* The length of the UTF-8 sequence at bytes (a lead byte >= 0x80), or 0 where it is not valid UTF-8. */
static int utf8_sequence(const uint8_t *bytes, const uint8_t *end) {
    uint8_t lead = bytes[0];
    int length;
    uint32_t point;
    if (lead >= 0xc2 && lead <= 0xdf) { length = 2; point = lead & 0x1f; }
    else if (lead >= 0xe0 && lead <= 0xef) { length = 3; point = lead & 0x0f; }
    else if (lead >= 0xf0 && lead <= 0xf4) { length = 4; point = lead & 0x07; }
    else return 0;
    if (end - bytes < length) return 0;
    for (int index = 1; index < length; index++) {
        if ((bytes[index] & 0xc0) != 0x80) return 0;
        point = (point << 6) | (bytes[index] & 0x3f);
    }
    if ((length == 3 && (point < 0x800 || (point >= 0xd800 && point <= 0xdfff))) || (length == 4 && (point < 0x10000 || point > 0x10ffff)))
        return 0;
    return length;
}

static int valid_utf8(const uint8_t *bytes, const uint8_t *end) {
    if (!has_high_bytes(bytes, end)) return 1;
    while (bytes < end) {
        if (*bytes < 0x80) { bytes++; continue; }
        int length = utf8_sequence(bytes, end);
        if (!length) return 0;
        bytes += length;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------- CSV fields */

/* The first byte at or after from that is a quote, or end. */
static const uint8_t *find_quote(const uint8_t *from, const uint8_t *end) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"');
    while (from + 16 <= end) {
        int mask = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)from), quote));
        if (mask) return from + __builtin_ctz(mask);
        from += 16;
    }
#endif
    while (from < end && *from != '"') from++;
    return from;
}

/* The first byte at or after from that ends or breaks an unquoted field (, \n " \r), or end. */
static const uint8_t *find_separator(const uint8_t *from, const uint8_t *end) {
#ifdef __SSE2__
    const __m128i comma = _mm_set1_epi8(','), newline = _mm_set1_epi8('\n'), quote = _mm_set1_epi8('"'),
                  carriage = _mm_set1_epi8('\r');
    while (from + 16 <= end) {
        __m128i block = _mm_loadu_si128((const __m128i *)from);
        __m128i hits = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(block, comma), _mm_cmpeq_epi8(block, newline)),
                                    _mm_or_si128(_mm_cmpeq_epi8(block, quote), _mm_cmpeq_epi8(block, carriage)));
        int mask = _mm_movemask_epi8(hits);
        if (mask) return from + __builtin_ctz(mask);
        from += 16;
    }
#endif
    while (from < end && *from != ',' && *from != '\n' && *from != '"' && *from != '\r') from++;
    return from;
}

/* Reads one field at from into field; returns the byte after it (a comma, a newline or end), or NULL
 * where the field breaks the dialect (an unclosed quote, a stray quote, a carriage return). */
static const uint8_t *read_field(const uint8_t *from, const uint8_t *end, field_t *field) {
    field->begin = from;
    if (from < end && *from == '"') {
        const uint8_t *at = from + 1;
        for (;;) {
            at = find_quote(at, end);
            if (at == end) return NULL;
            if (at + 1 < end && at[1] == '"') { at += 2; continue; }
            break;
        }
        field->end = at + 1;
        field->quoted = 1;
        if (field->end < end && *field->end != ',' && *field->end != '\n') return NULL;
        return field->end;
    }
    const uint8_t *at = find_separator(from, end);
    if (at < end && (*at == '"' || *at == '\r')) return NULL;
    field->end = at;
    field->quoted = 0;
    return at;
}

/* The field's text without its quotes; 0 where it holds an escaped quote (no number or time does). */
static int plain_content(const field_t *field, const uint8_t **begin, const uint8_t **end) {
    *begin = field->begin + field->quoted;
    *end = field->end - field->quoted;
    return !field->quoted || find_quote(*begin, *end) == *end;
}

/* ---------------------------------------------------------------------------------- numbers and times */

/* A token count as PostgreSQL writes a bigint: 1 to 18 digits, maybe negative. */
static int read_count(const field_t *field, int64_t *value) {
    const uint8_t *at, *end;
    if (!plain_content(field, &at, &end)) return 0;
    if (at == end) { *value = MISSING; return 1; }
    int negative = *at == '-';
    at += negative;
    if (end - at < 1 || end - at > 18) return 0;
    int64_t number = 0;
    for (; at < end; at++) {
        if (*at < '0' || *at > '9') return 0;
        number = number * 10 + (*at - '0');
    }
    *value = negative ? -number : number;
    return 1;
}

static int digits(const uint8_t *at, int count, int *value) {
    *value = 0;
    for (int index = 0; index < count; index++) {
        if (at[index] < '0' || at[index] > '9') return 0;
        *value = *value * 10 + (at[index] - '0');
    }
    return 1;
}

static int64_t days_from_civil(int64_t year, int month, int day) {
    year -= month <= 2;
    int64_t era = (year >= 0 ? year : year - 399) / 400;
    int64_t year_of_era = year - era * 400;
    int64_t day_of_year = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
    int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + day_of_era - 719468;
}

static int days_in_month(int year, int month) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return days[month - 1] + (month == 2 && leap);
}

/* YYYY-MM-DD HH:MM:SS[.ffffff][Z|+HH|+HH:MM] (or T between date and time) as microseconds since 1970 UTC. */
static int read_time(const field_t *field, int64_t *value) {
    const uint8_t *at, *end;
    if (!plain_content(field, &at, &end)) return 0;
    if (at == end) { *value = MISSING; return 1; }
    int year, month, day, hour, minute, second;
    if (end - at < 19 || at[4] != '-' || at[7] != '-' || (at[10] != ' ' && at[10] != 'T') || at[13] != ':' || at[16] != ':')
        return 0;
    if (!digits(at, 4, &year) || !digits(at + 5, 2, &month) || !digits(at + 8, 2, &day) || !digits(at + 11, 2, &hour)
        || !digits(at + 14, 2, &minute) || !digits(at + 17, 2, &second))
        return 0;
    if (year < 1 || month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 || minute > 59 || second > 59)
        return 0;
    at += 19;
    int64_t micros = 0;
    if (at < end && *at == '.') {
        int count = 0;
        for (at++; at < end && *at >= '0' && *at <= '9' && count < 7; at++, count++) micros = micros * 10 + (*at - '0');
        if (count == 0 || count > 6) return 0;
        for (; count < 6; count++) micros *= 10;
    }
    int64_t offset_minutes = 0;
    if (at < end && *at == 'Z') {
        at++;
    } else if (at < end && (*at == '+' || *at == '-')) {
        int sign = *at == '-' ? -1 : 1, offset_hours, offset_rest = 0;
        if (end - at < 3 || !digits(at + 1, 2, &offset_hours)) return 0;
        at += 3;
        if (at < end && *at == ':') {
            if (end - at < 3 || !digits(at + 1, 2, &offset_rest)) return 0;
            at += 3;
        }
        if (offset_hours > 15 || offset_rest > 59) return 0;
        offset_minutes = sign * (offset_hours * 60 + offset_rest);
    }
    if (at != end) return 0;
    int64_t seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    *value = seconds * 1000000 + micros;
    return 1;
}

/* --------------------------------------------------------------------------------------------- JSON */

/* JSON inside a quoted CSV field writes each of its quotes twice; `quote` is the width of one (2, or 1 in
 * an unquoted field, which holds no quotes at all). Every reader returns the byte after what it read, or
 * NULL where the text is not JSON as RFC 8259 writes it (DuckDB accepts at least that much). */

typedef struct {
    const uint8_t *end;
    int quote;
} json_text;

static const uint8_t *json_space(const json_text *text, const uint8_t *at) {
    while (at < text->end && (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r')) at++;
    return at;
}

static int hex_digit(uint8_t byte) {
    return (byte >= '0' && byte <= '9') || (byte >= 'a' && byte <= 'f') || (byte >= 'A' && byte <= 'F');
}

/* Whether a JSON quote starts at at: one quote byte, or two in a quoted CSV field, where a single one
 * is the field's closing quote. */
static inline int json_quote(const json_text *text, const uint8_t *at) {
    return at < text->end && *at == '"' && (text->quote == 1 || (at + 1 < text->end && at[1] == '"'));
}

/* The first byte at or after from that may end or break a string: a quote, a backslash, a control
 * character or a byte of a multi-byte character. */
static const uint8_t *find_string_special(const uint8_t *from, const uint8_t *end) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(' ');
    while (from + 16 <= end) {
        __m128i block = _mm_loadu_si128((const __m128i *)from);
        /* Signed: bytes from 0x80 compare below a space too. */
        __m128i hits = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(block, quote), _mm_cmpeq_epi8(block, backslash)),
                                    _mm_cmplt_epi8(block, space));
        int mask = _mm_movemask_epi8(hits);
        if (mask) return from + __builtin_ctz(mask);
        from += 16;
    }
#endif
    while (from < end && *from != '"' && *from != '\\' && *from >= 0x20 && *from < 0x80) from++;
    return from;
}

/* The code unit of the \uXXXX escape at at, or -1 where there is none. */
static int json_code_unit(const json_text *text, const uint8_t *at) {
    if (text->end - at < 6 || at[0] != '\\' || at[1] != 'u') return -1;
    int unit = 0;
    for (int index = 2; index < 6; index++) {
        uint8_t byte = at[index];
        if (!hex_digit(byte)) return -1;
        unit = unit * 16 + (byte <= '9' ? byte - '0' : (byte | 0x20) - 'a' + 10);
    }
    return unit;
}

/* A string; *escaped says whether it held a backslash escape. */
static const uint8_t *json_string(const json_text *text, const uint8_t *at, int *escaped) {
    if (!json_quote(text, at)) return NULL;
    at += text->quote;
    *escaped = 0;
    for (;;) {
        at = find_string_special(at, text->end);
        if (at >= text->end) return NULL;
        uint8_t byte = *at;
        if (byte == '"') return json_quote(text, at) ? at + text->quote : NULL;
        if (byte == '\\') {
            *escaped = 1;
            if (++at >= text->end) return NULL;
            if (*at == '"') {
                if (!json_quote(text, at)) return NULL;
                at += text->quote;
            } else if (*at == 'u') {
                int unit = json_code_unit(text, at - 1);
                if (unit < 0 || (unit >= 0xdc00 && unit <= 0xdfff)) return NULL;
                at += 5;
                if (unit >= 0xd800 && unit <= 0xdbff) {
                    /* A high surrogate counts only with its low one; a lone one is DuckDB's call. */
                    int low = json_code_unit(text, at);
                    if (low < 0xdc00 || low > 0xdfff) return NULL;
                    at += 6;
                }
            } else if (*at && strchr("\\/bfnrt", *at)) {
                at++;
            } else {
                return NULL;
            }
        } else if (byte < 0x20) {
            return NULL;
        } else {
            int length = utf8_sequence(at, text->end);
            if (!length) return NULL;
            at += length;
        }
    }
}

static const uint8_t *json_number(const json_text *text, const uint8_t *at) {
    const uint8_t *end = text->end;
    if (at < end && *at == '-') at++;
    if (at >= end) return NULL;
    if (*at == '0') at++;
    else if (*at >= '1' && *at <= '9') while (at < end && *at >= '0' && *at <= '9') at++;
    else return NULL;
    if (at < end && *at == '.') {
        const uint8_t *fraction = ++at;
        while (at < end && *at >= '0' && *at <= '9') at++;
        if (at == fraction) return NULL;
    }
    if (at < end && (*at == 'e' || *at == 'E')) {
        at++;
        if (at < end && (*at == '+' || *at == '-')) at++;
        const uint8_t *exponent = at;
        while (at < end && *at >= '0' && *at <= '9') at++;
        /* A number that may overflow a double is left to DuckDB. */
        if (at == exponent || at - exponent > 2) return NULL;
    }
    return at;
}

static const uint8_t *json_value(const json_text *text, const uint8_t *at, int depth);

static const uint8_t *json_container(const json_text *text, const uint8_t *at, int depth) {
    uint8_t close = *at == '{' ? '}' : ']';
    int object = close == '}';
    if (depth > MAX_JSON_DEPTH) return NULL;
    at = json_space(text, at + 1);
    if (at < text->end && *at == close) return at + 1;
    for (;;) {
        if (object) {
            int escaped;
            if (!(at = json_string(text, at, &escaped))) return NULL;
            at = json_space(text, at);
            if (at >= text->end || *at != ':') return NULL;
            at = json_space(text, at + 1);
        }
        if (!(at = json_value(text, at, depth + 1))) return NULL;
        at = json_space(text, at);
        if (at >= text->end) return NULL;
        if (*at == close) return at + 1;
        if (*at != ',') return NULL;
        at = json_space(text, at + 1);
    }
}

static const uint8_t *json_literal(const json_text *text, const uint8_t *at, const char *word) {
    size_t length = strlen(word);
    if ((size_t)(text->end - at) < length || memcmp(at, word, length) != 0) return NULL;
    return at + length;
}

static const uint8_t *json_value(const json_text *text, const uint8_t *at, int depth) {
    if (at >= text->end) return NULL;
    int escaped;
    switch (*at) {
    case '"': return json_string(text, at, &escaped);
    case '{': case '[': return json_container(text, at, depth);
    case 't': return json_literal(text, at, "true");
    case 'f': return json_literal(text, at, "false");
    case 'n': return json_literal(text, at, "null");
    default: return json_number(text, at);
    }
}

/* Hashes each wanted key's raw value into *row_hash, in the keys' order; an absent key (NULL) hashes as
 * its seed alone, so rows without a key, or without metadata, agree. */
static void hash_values(const uint8_t *const *value_begin, const uint8_t *const *value_end, int key_count,
                        uint64_t *row_hash) {
    for (int index = 0; index < key_count; index++) {
        uint64_t seed = 1000 + (uint64_t)index;
        uint64_t value_hash = value_begin[index] ? hash_bytes(value_begin[index], (size_t)(value_end[index] - value_begin[index]), seed)
                                                 : finish(seed);
        *row_hash = finish(*row_hash ^ value_hash);
    }
}

/* Reads the metadata object starting at at and hashes the raw value of each wanted top-level key into
 * *row_hash (absent keys hash alike). Returns the byte after the object, or NULL where it is not a JSON
 * object this reader takes. */
static const uint8_t *hash_metadata(json_text text, const uint8_t *at, const uint8_t *const *keys,
                                    const int32_t *key_lengths, int key_count, uint64_t *row_hash) {
    const uint8_t *value_begin[MAX_KEYS] = {0}, *value_end[MAX_KEYS] = {0};
    at = json_space(&text, at);
    if (at >= text.end || *at != '{') return NULL;
    at = json_space(&text, at + 1);
    if (at < text.end && *at == '}') {
        at++;
    } else {
        for (;;) {
            int escaped;
            const uint8_t *key = at;
            if (!(at = json_string(&text, at, &escaped))) return NULL;
            /* An escaped key might spell a wanted one: DuckDB's call. */
            if (escaped) return NULL;
            const uint8_t *key_text = key + text.quote;
            size_t key_length = (size_t)(at - text.quote - key_text);
            at = json_space(&text, at);
            if (at >= text.end || *at != ':') return NULL;
            const uint8_t *value = json_space(&text, at + 1);
            if (!(at = json_value(&text, value, 1))) return NULL;
            for (int index = 0; index < key_count; index++) {
                if (key_length == (size_t)key_lengths[index] && memcmp(key_text, keys[index], key_length) == 0) {
                    if (value_begin[index]) return NULL; /* which of two equal keys counts is DuckDB's call too */
                    value_begin[index] = value;
                    value_end[index] = at;
                }
            }
            at = json_space(&text, at);
            if (at >= text.end) return NULL;
            if (*at == '}') { at++; break; }
            if (*at != ',') return NULL;
            at = json_space(&text, at + 1);
        }
    }
    hash_values(value_begin, value_end, key_count, row_hash);
    return at;
}

/* The metadata field at at: a quoted JSON object, read straight from the line (reading it finds the
 * field's end), or an empty field (NULL: every key absent). Returns the byte after the field, or NULL. */
static const uint8_t *read_metadata(const uint8_t *at, const uint8_t *end, const uint8_t *const *keys,
                                    const int32_t *key_lengths, int key_count, uint64_t *row_hash) {
    if (at < end && *at == '"') {
        json_text text = {end, 2};
        const uint8_t *after = hash_metadata(text, at + 1, keys, key_lengths, key_count, row_hash);
        if (!after) return NULL;
        after = json_space(&text, after);
        if (after >= end || *after != '"' || json_quote(&text, after)) return NULL;
        after++;
        return (after == end || *after == ',' || *after == '\n') ? after : NULL;
    }
    /* Unquoted: empty (NULL), or a document without quotes such as {} (PostgreSQL quotes no other). */
    field_t field;
    const uint8_t *after = read_field(at, end, &field);
    if (!after) return NULL;
    if (field.begin == field.end) {
        const uint8_t *none[MAX_KEYS] = {0};
        hash_values(none, none, key_count, row_hash);
        return after;
    }
    json_text text = {field.end, 1};
    const uint8_t *object_end = hash_metadata(text, field.begin, keys, key_lengths, key_count, row_hash);
    return object_end && json_space(&text, object_end) == field.end ? after : NULL;
}

/* ------------------------------------------------------------------------------------------- identity */

/* csvscan.py calls these two before anything else and refuses a library whose answers differ from what it
 * was written for: a stale .so left by an older build must not be called with a newer argument list. Bump
 * the ABI version with any change to seatplan_scan_lines' arguments, statuses, slots or limits. */
#define SEATPLAN_CSVSCAN_ABI 2
#define STR_(x) #x
#define STR(x) STR_(x)

int32_t seatplan_csvscan_abi(void) { return SEATPLAN_CSVSCAN_ABI; }

const char *seatplan_csvscan_signature(void) {
    return "abi=" STR(SEATPLAN_CSVSCAN_ABI)
           " int seatplan_scan_lines(u8*,i64,i64,i64,i32*,i32,u8**,i32*,i32,i64*,i64*,i64*,i64*,u64*,i64*,i64,i64*,i64*,i64*)"
           " slots=" STR(MAX_SLOTS) " keys=" STR(MAX_KEYS) " statuses=8 missing=INT64_MIN";
}

/* --------------------------------------------------------------------------------------------- lines */

/* Reads the lines of buffer[position, size) that start before stop, at most capacity of them, into the
 * output arrays. *next is where the first line not read starts; *problem_at, on a status past SCAN_FULL,
 * where the line that stopped the scan starts. Returns the status; *rows the lines read. */
int seatplan_scan_lines(const uint8_t *buffer, int64_t size, int64_t position, int64_t stop,
                        const int32_t *slot_of_field, int32_t field_count,
                        const uint8_t *const *keys, const int32_t *key_lengths, int32_t key_count,
                        int64_t *start_us, int64_t *end_us, int64_t *prompt_tokens, int64_t *completion_tokens,
                        uint64_t *row_hash, int64_t *line_offset, int64_t capacity,
                        int64_t *rows, int64_t *next, int64_t *problem_at) {
    const uint8_t *end = buffer + size;
    const uint8_t *at = buffer + position;
    field_t fields[MAX_SLOTS];
    int64_t row = 0;
    int status = SCAN_DONE;
    memset(fields, 0, sizeof fields);
    *rows = 0;
    *next = *problem_at = position;
    /* Arguments this reader was not built for (csvscan.py never passes them) stop it at once. */
    if (key_count > MAX_KEYS) return SCAN_JSON;
    int last_slot = SLOT_FIRST_HASHED - 1;
    for (int index = 0; index < field_count; index++) {
        if (slot_of_field[index] >= MAX_SLOTS) return SCAN_FIELD_COUNT;
        if (slot_of_field[index] > last_slot) last_slot = slot_of_field[index];
    }
    while (at < buffer + stop && at < end) {
        if (row == capacity) { status = SCAN_FULL; break; }
        const uint8_t *line = at;
        int field_index = 0;
        uint64_t metadata_hash = 0;
        for (;;) {
            if (field_index >= field_count) { status = SCAN_FIELD_COUNT; break; }
            int slot = slot_of_field[field_index++];
            const uint8_t *after;
            if (slot == SLOT_METADATA) {
                after = read_metadata(at, end, keys, key_lengths, key_count, &metadata_hash);
                if (!after) { status = SCAN_JSON; break; }
            } else {
                field_t field;
                after = read_field(at, end, &field);
                if (!after) { status = SCAN_QUOTES; break; }
                if (slot >= 0 && slot < MAX_SLOTS) fields[slot] = field;
            }
            if (after == end) { at = end; break; }
            at = after + 1;
            if (*after == '\n') break;
        }
        if (status == SCAN_DONE && field_index != field_count) status = SCAN_FIELD_COUNT;
        if (status != SCAN_DONE) { *problem_at = line - buffer; break; }
        uint64_t hash = 0;
        for (int slot = SLOT_FIRST_HASHED; slot <= last_slot; slot++) {
            if (!fields[slot].begin) continue;
            if (!valid_utf8(fields[slot].begin, fields[slot].end)) { status = SCAN_UTF8; break; }
            hash = finish(hash ^ hash_bytes(fields[slot].begin, (size_t)(fields[slot].end - fields[slot].begin), (uint64_t)slot));
        }
        if (status == SCAN_DONE && fields[SLOT_CHECKED].begin && !valid_utf8(fields[SLOT_CHECKED].begin, fields[SLOT_CHECKED].end))
            status = SCAN_UTF8;
        hash = finish(hash ^ metadata_hash);
        if (status == SCAN_DONE && (!read_count(&fields[SLOT_PROMPT], &prompt_tokens[row]) || !read_count(&fields[SLOT_COMPLETION], &completion_tokens[row])))
            status = SCAN_NUMBER;
        if (status == SCAN_DONE && (!read_time(&fields[SLOT_START], &start_us[row]) || !read_time(&fields[SLOT_END], &end_us[row])))
            status = SCAN_TIME;
        if (status != SCAN_DONE) { *problem_at = line - buffer; break; }
        row_hash[row] = hash;
        line_offset[row] = line - buffer;
        row++;
    }
    *rows = row;
    *next = (status == SCAN_DONE || status == SCAN_FULL) ? at - buffer : *problem_at;
    return status;
}
