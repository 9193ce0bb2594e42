/* libFuzzer harness for the compiled CSV reader (src/seatplan/usage/_csvscan.c), built with AddressSanitizer and
 * UndefinedBehaviorSanitizer by tests/fuzz/test_csvscan_sanitized.py.
 *
 * Each input is the body of a spend-log CSV (the lines after the header). The slots and metadata keys are the
 * ones csvscan.py passes for the real LiteLLM header (CSVSCAN_SLOTS, CSVSCAN_KEYS in the environment). The body
 * is scanned the way csvscan.py scans it (window by window, small output arrays that fill up), and every answer
 * is checked: a known status, rows within capacity, offsets rising inside the buffer, progress on every call, and
 * on a stop, where it stopped. A sanitizer report or a failed check aborts (a crash libFuzzer saves). Whether the
 * values agree with DuckDB is checked by the test, which replays the corpus this run grew through DuckDB.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/seatplan/usage/_csvscan.c"

static int32_t slots[MAX_SLOTS];
static int32_t field_count;
static const uint8_t *keys[MAX_KEYS];
static int32_t key_lengths[MAX_KEYS];
static int32_t key_count;

#define CHECK(condition) do { if (!(condition)) { fprintf(stderr, "check failed: %s (line %d)\n", #condition, __LINE__); abort(); } } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *slot_text = getenv("CSVSCAN_SLOTS"), *key_text = getenv("CSVSCAN_KEYS");
    if (!slot_text || !key_text) { fprintf(stderr, "set CSVSCAN_SLOTS and CSVSCAN_KEYS\n"); exit(2); }
    for (char *end; *slot_text && field_count < MAX_SLOTS; slot_text = *end ? end + 1 : end)
        slots[field_count++] = (int32_t)strtol(slot_text, &end, 10);
    char *copy = strdup(key_text);
    for (char *key = strtok(copy, ","); key && key_count < MAX_KEYS; key = strtok(NULL, ",")) {
        keys[key_count] = (const uint8_t *)key;
        key_lengths[key_count++] = (int32_t)strlen(key);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    /* The first byte sets the output capacity (1..32 rows) and the window size, so FULL and window ends are hit. */
    int64_t capacity = 1 + (data[0] & 31), window = 1 + (data[0] >> 5) * 64;
    data++; size--;
    uint8_t *buffer = malloc(size ? size : 1); /* exactly the input's bytes: any read past them is an ASan report */
    memcpy(buffer, data, size);
    int64_t *start_us = malloc(8 * capacity), *end_us = malloc(8 * capacity), *prompt = malloc(8 * capacity),
            *completion = malloc(8 * capacity), *offsets = malloc(8 * capacity);
    uint64_t *hashes = malloc(8 * capacity);
    int64_t position = 0, last_offset = -1;
    while (position < (int64_t)size) {
        int64_t stop = position + window < (int64_t)size ? position + window : (int64_t)size;
        int64_t rows = -1, next = -1, problem_at = -1;
        int status = seatplan_scan_lines(buffer, (int64_t)size, position, stop, slots, field_count, keys, key_lengths,
                                         key_count, start_us, end_us, prompt, completion, hashes, offsets, capacity,
                                         &rows, &next, &problem_at);
        CHECK(status >= SCAN_DONE && status <= SCAN_UTF8);
        CHECK(rows >= 0 && rows <= capacity);
        for (int64_t row = 0; row < rows; row++) {
            CHECK(offsets[row] > last_offset && offsets[row] >= position && offsets[row] < (int64_t)size);
            last_offset = offsets[row];
        }
        if (status > SCAN_FULL) {
            CHECK(problem_at >= position && problem_at < (int64_t)size && next == problem_at);
            break;
        }
        CHECK(next >= position && next <= (int64_t)size);
        CHECK(next > position || rows == 0);
        if (next == position) break; /* nothing started before stop: csvscan.py moves on to the next part */
        position = next;
    }
    free(buffer); free(start_us); free(end_us); free(prompt); free(completion); free(offsets); free(hashes);
    return 0;
}
