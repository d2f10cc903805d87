/* Structural query scanner (see scan.h). The definitions live in qdrant_guard/_scan_py.py; the
 * oracle tests compare this file against it on every case.
 *
 * Shape: one left-to-right pass over the bytes, 64 at a time where they are plain ASCII (see "The
 * pass" below); controls, escape triggers and non-ASCII take a byte-at-a-time general path. Tokens
 * are hashed when they end, into an open-addressing table that starts on the stack and grows with
 * the distinct tokens; each token's table entry number is its id, and repeated n-grams are found
 * from the ids 64 tokens at a time (ngram_chunk). The table's hash is keyed per process from the OS
 * (hash_key): three AES rounds where the CPU has AES-NI (aes_token_hash), folded 128-bit multiplies
 * elsewhere (token_hash). Which tokens share a slot depends on a secret, so text
 * cannot be built to collide, and tokens that differ only in their high bytes (ORD00001,
 * ORD00002, ...) spread like any others. Collisions only ever cost time; the results are exact. */
#include "scan.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef QG_SCAN_TEST_KEY
#include <inttypes.h>
#include <stdio.h>
#endif
#if defined(__linux__)
#include <sys/random.h>
#endif

#if defined(__SSE2__) && !defined(QG_SCAN_NO_SIMD)
#include <emmintrin.h>
#define QG_SCAN_SSE2 1
#endif

/* x86-64 builds also carry an AVX2/BMI variant of the pass, chosen at run time (qg_scan). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(QG_SCAN_NO_SIMD)
#define QG_SCAN_DISPATCH 1
#include <immintrin.h>
#endif

#define MAX_NGRAM 8
/* N-gram runs are found per chunk of NG_CHUNK token ids (see ngram_chunk); a streak that becomes
 * full at token k needs the position of token k - 2g + 1, so NG_KEEP >= 2 * MAX_NGRAM - 1. */
#define NG_CHUNK 64
#define NG_KEEP 16
/* The block loop (fast_tokens) stores a whole 64-byte block's tokens, up to 32, before it checks
 * for a full chunk: room for them past the chunk. */
#define NG_SLACK 32

/* ASCII byte classes. */
#define C_ALNUM 1u  /* [A-Za-z0-9]: counted for the model-token estimate */
#define C_PLAIN 2u  /* printable, not space, not an escape trigger: the fast loop */
#define C_WS 4u     /* str.isspace */
#define C_CTRL 8u   /* control_char */
#define C_TRIG 16u  /* % \ & */
#define C_B64 32u   /* [A-Za-z0-9+/] */
#define C_HEX 64u   /* [0-9A-Fa-f] */
#define C_DIGIT 128u

static const uint8_t *ascii_class(void)
{
    /* Built on first use; the values are constant, so a racing second build writes the same bytes. */
    static uint8_t cls[256];
    static volatile int ready = 0;
    if (ready)
        return cls;
    for (int b = 0; b < 128; b++) {
        uint8_t c = 0;
        int alnum = (b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z');
        if (alnum)
            c |= C_ALNUM | C_B64;
        if (b == '+' || b == '/')
            c |= C_B64;
        if ((b >= '0' && b <= '9') || (b >= 'A' && b <= 'F') || (b >= 'a' && b <= 'f'))
            c |= C_HEX;
        if (b >= '0' && b <= '9')
            c |= C_DIGIT;
        if ((b >= 9 && b <= 13) || (b >= 0x1C && b <= 0x20))
            c |= C_WS;
        if ((b < 0x20 && b != 9 && b != 10 && b != 13) || b == 0x7F)
            c |= C_CTRL;
        if (b == '%' || b == '\\' || b == '&')
            c |= C_TRIG;
        if (b > 0x20 && b < 0x7F && !(c & C_TRIG))
            c |= C_PLAIN;
        cls[b] = c;
    }
    ready = 1;
    return cls;
}

static inline unsigned popcount64(uint64_t x, int hw)
{
    if (hw)
        return (unsigned)__builtin_popcountll(x);
    /* Without hw (the build has no -mpopcnt) __builtin_popcountll is a library call: count in
     * bit slices instead. */
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
}

/* ---------------------------------------------------------------------------------------------
 * Character data (same tables as the reference module). */

static const uint32_t extended_pictographic[][2] = {
    {0x000A9, 0x000A9}, {0x000AE, 0x000AE}, {0x0203C, 0x0203C}, {0x02049, 0x02049},
    {0x02122, 0x02122}, {0x02139, 0x02139}, {0x02194, 0x02199}, {0x021A9, 0x021AA},
    {0x0231A, 0x0231B}, {0x02328, 0x02328}, {0x023CF, 0x023CF}, {0x023E9, 0x023F3},
    {0x023F8, 0x023FA}, {0x024C2, 0x024C2}, {0x025AA, 0x025AB}, {0x025B6, 0x025B6},
    {0x025C0, 0x025C0}, {0x025FB, 0x025FE}, {0x02600, 0x02604}, {0x0260E, 0x0260E},
    {0x02611, 0x02611}, {0x02614, 0x02615}, {0x02618, 0x02618}, {0x0261D, 0x0261D},
    {0x02620, 0x02620}, {0x02622, 0x02623}, {0x02626, 0x02626}, {0x0262A, 0x0262A},
    {0x0262E, 0x0262F}, {0x02638, 0x0263A}, {0x02640, 0x02640}, {0x02642, 0x02642},
    {0x02648, 0x02653}, {0x0265F, 0x02660}, {0x02663, 0x02663}, {0x02665, 0x02666},
    {0x02668, 0x02668}, {0x0267B, 0x0267B}, {0x0267E, 0x0267F}, {0x02692, 0x02697},
    {0x02699, 0x02699}, {0x0269B, 0x0269C}, {0x026A0, 0x026A1}, {0x026A7, 0x026A7},
    {0x026AA, 0x026AB}, {0x026B0, 0x026B1}, {0x026BD, 0x026BE}, {0x026C4, 0x026C5},
    {0x026C8, 0x026C8}, {0x026CE, 0x026CF}, {0x026D1, 0x026D1}, {0x026D3, 0x026D4},
    {0x026E9, 0x026EA}, {0x026F0, 0x026F5}, {0x026F7, 0x026FA}, {0x026FD, 0x026FD},
    {0x02702, 0x02702}, {0x02705, 0x02705}, {0x02708, 0x0270D}, {0x0270F, 0x0270F},
    {0x02712, 0x02712}, {0x02714, 0x02714}, {0x02716, 0x02716}, {0x0271D, 0x0271D},
    {0x02721, 0x02721}, {0x02728, 0x02728}, {0x02733, 0x02734}, {0x02744, 0x02744},
    {0x02747, 0x02747}, {0x0274C, 0x0274C}, {0x0274E, 0x0274E}, {0x02753, 0x02755},
    {0x02757, 0x02757}, {0x02763, 0x02764}, {0x02795, 0x02797}, {0x027A1, 0x027A1},
    {0x027B0, 0x027B0}, {0x027BF, 0x027BF}, {0x02934, 0x02935}, {0x02B05, 0x02B07},
    {0x02B1B, 0x02B1C}, {0x02B50, 0x02B50}, {0x02B55, 0x02B55}, {0x03030, 0x03030},
    {0x0303D, 0x0303D}, {0x03297, 0x03297}, {0x03299, 0x03299}, {0x1F004, 0x1F004},
    {0x1F02C, 0x1F02F}, {0x1F094, 0x1F09F}, {0x1F0AF, 0x1F0B0}, {0x1F0C0, 0x1F0C0},
    {0x1F0CF, 0x1F0D0}, {0x1F0F6, 0x1F0FF}, {0x1F170, 0x1F171}, {0x1F17E, 0x1F17F},
    {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A}, {0x1F1AE, 0x1F1E5}, {0x1F201, 0x1F20F},
    {0x1F21A, 0x1F21A}, {0x1F22F, 0x1F22F}, {0x1F232, 0x1F23A}, {0x1F23C, 0x1F23F},
    {0x1F249, 0x1F25F}, {0x1F266, 0x1F321}, {0x1F324, 0x1F393}, {0x1F396, 0x1F397},
    {0x1F399, 0x1F39B}, {0x1F39E, 0x1F3F0}, {0x1F3F3, 0x1F3F5}, {0x1F3F7, 0x1F3FA},
    {0x1F400, 0x1F4FD}, {0x1F4FF, 0x1F53D}, {0x1F549, 0x1F54E}, {0x1F550, 0x1F567},
    {0x1F56F, 0x1F570}, {0x1F573, 0x1F57A}, {0x1F587, 0x1F587}, {0x1F58A, 0x1F58D},
    {0x1F590, 0x1F590}, {0x1F595, 0x1F596}, {0x1F5A4, 0x1F5A5}, {0x1F5A8, 0x1F5A8},
    {0x1F5B1, 0x1F5B2}, {0x1F5BC, 0x1F5BC}, {0x1F5C2, 0x1F5C4}, {0x1F5D1, 0x1F5D3},
    {0x1F5DC, 0x1F5DE}, {0x1F5E1, 0x1F5E1}, {0x1F5E3, 0x1F5E3}, {0x1F5E8, 0x1F5E8},
    {0x1F5EF, 0x1F5EF}, {0x1F5F3, 0x1F5F3}, {0x1F5FA, 0x1F64F}, {0x1F680, 0x1F6C5},
    {0x1F6CB, 0x1F6D2}, {0x1F6D5, 0x1F6E5}, {0x1F6E9, 0x1F6E9}, {0x1F6EB, 0x1F6F0},
    {0x1F6F3, 0x1F6FF}, {0x1F7DA, 0x1F7FF}, {0x1F80C, 0x1F80F}, {0x1F848, 0x1F84F},
    {0x1F85A, 0x1F85F}, {0x1F888, 0x1F88F}, {0x1F8AE, 0x1F8AF}, {0x1F8BC, 0x1F8BF},
    {0x1F8C2, 0x1F8CF}, {0x1F8D9, 0x1F8FF}, {0x1F90C, 0x1F93A}, {0x1F93C, 0x1F945},
    {0x1F947, 0x1F9FF}, {0x1FA58, 0x1FA5F}, {0x1FA6E, 0x1FAFF}, {0x1FC00, 0x1FFFD}
};

static int is_extended_pictographic(uint32_t cp)
{
    if (cp < 0xA9 || (cp > 0xAE && cp < 0x203C) || (cp > 0x3299 && cp < 0x1F004) || cp > 0x1FFFD)
        return 0;
    size_t lo = 0, hi = sizeof extended_pictographic / sizeof extended_pictographic[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < extended_pictographic[mid][0])
            hi = mid;
        else if (cp > extended_pictographic[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

static const char *const html_entity_names[] = {
    "AElig", "Aacute", "Agrave", "Alpha", "Beta", "Dagger", "Delta", "Eacute", "Gamma", "Hat",
    "NewLine", "Omega", "Prime", "Sigma", "Tab", "aacute", "acute", "aelig", "agrave", "alpha",
    "amp", "and", "apos", "ast", "asymp", "auml", "bdquo", "beta", "brvbar", "bsol", "bull", "cap",
    "ccedil", "cedil", "cent", "clubs", "colon", "comma", "commat", "copy", "crarr", "cup",
    "curren", "dArr", "dagger", "darr", "deg", "delta", "diams", "divide", "dollar", "eacute",
    "egrave", "empty", "emsp", "ensp", "equals", "equiv", "excl", "exist", "forall", "frac12",
    "frac14", "frac34", "gamma", "ge", "grave", "gt", "hArr", "harr", "hearts", "hellip", "iexcl",
    "infin", "int", "iquest", "isin", "lArr", "laquo", "larr", "lbrace", "lbrack", "lcub", "ldquo",
    "le", "lowbar", "loz", "lpar", "lrm", "lsaquo", "lsqb", "lsquo", "lt", "macr", "mdash", "micro",
    "midast", "middot", "minus", "nabla", "nbsp", "ndash", "ne", "not", "notin", "ntilde", "num",
    "omega", "oplus", "or", "ordf", "ordm", "oslash", "otimes", "ouml", "para", "part", "percnt",
    "period", "permil", "perp", "pi", "plus", "plusmn", "pound", "prime", "prod", "quest", "quot",
    "rArr", "radic", "raquo", "rarr", "rbrace", "rbrack", "rcub", "rdquo", "reg", "rlm", "rpar",
    "rsaquo", "rsqb", "rsquo", "sbquo", "sdot", "sect", "semi", "shy", "sigma", "sol", "spades",
    "sub", "sube", "sum", "sup", "sup1", "sup2", "sup3", "supe", "szlig", "thinsp", "times",
    "trade", "uarr", "uml", "uuml", "verbar", "vert", "yen", "zwj", "zwnj",
};

static int is_entity_name(const uint8_t *p, size_t len)
{
    size_t lo = 0, hi = sizeof html_entity_names / sizeof html_entity_names[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *name = html_entity_names[mid];
        size_t nlen = strlen(name);
        int c = memcmp(p, name, len < nlen ? len : nlen);
        if (c == 0)
            c = (len > nlen) - (len < nlen);
        if (c < 0)
            hi = mid;
        else if (c > 0)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* U+E0067 U+E0062 U+E0065 U+E006E U+E0067 U+E007F etc. in UTF-8: F3 A0 80|81 xx per tag. */
#define TAG(c) 0xF3, 0xA0, (uint8_t)(0x80 | (((0xE0000u + (c)) >> 6) & 0x3F)), \
               (uint8_t)(0x80 | ((0xE0000u + (c)) & 0x3F))
static const uint8_t rgi_tags[3][24] = {
    {TAG('g'), TAG('b'), TAG('e'), TAG('n'), TAG('g'), TAG(0x7F)},
    {TAG('g'), TAG('b'), TAG('s'), TAG('c'), TAG('t'), TAG(0x7F)},
    {TAG('g'), TAG('b'), TAG('w'), TAG('l'), TAG('s'), TAG(0x7F)},
};

static int is_unicode_space(uint32_t cp)
{
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static int is_selector(uint32_t cp)
{
    return (cp >= 0xFE00 && cp <= 0xFE0F) || (cp >= 0xE0100 && cp <= 0xE01EF);
}

/* Strict UTF-8 decode of one code point at s[i]; returns its length, or 0 for an invalid byte.
 * allow_surrogates accepts ED A0..BF (a str encoded with 'surrogatepass'). */
static int decode(const uint8_t *s, size_t n, size_t i, int allow_surrogates, uint32_t *cp)
{
    uint8_t b0 = s[i];
    size_t left = n - i;
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    if (b0 < 0xC2)
        return 0;
    if (b0 < 0xE0) {
        if (left < 2 || (s[i + 1] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(b0 & 0x1F) << 6) | (s[i + 1] & 0x3F);
        return 2;
    }
    if (b0 < 0xF0) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (b0 == 0xE0)
            lo = 0xA0;
        else if (b0 == 0xED && !allow_surrogates)
            hi = 0x9F;
        if (left < 3 || s[i + 1] < lo || s[i + 1] > hi || (s[i + 2] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
        return 3;
    }
    if (b0 < 0xF5) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (b0 == 0xF0)
            lo = 0x90;
        else if (b0 == 0xF4)
            hi = 0x8F;
        if (left < 4 || s[i + 1] < lo || s[i + 1] > hi || (s[i + 2] & 0xC0) != 0x80 ||
            (s[i + 3] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
              ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
        return 4;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Scanner state */

/* One distinct token. Offsets and token indices fit 32 bits because inputs are below
 * QG_SCAN_MAX_BYTES.
 *
 * Entries are appended in first-seen order; an open-addressing index of slots (entry number + 1,
 * 0: empty) finds them. Two sizes of slot. Small vocabularies (up to STACK_ENTRIES distinct tokens)
 * live in the small table (entries on the stack, index on the stack or the caller's) with 2-byte slots,
 * kept at most an eighth full: a lookup that misses its first
 * slot costs a mispredicted branch, far more than the extra memory, and at an eighth nearly every
 * token is found in its first slot. Larger ones move to the heap with 4-byte slots, kept at most
 * half full, so that what is read at random stays small enough for the caches.
 *
 * The small table also keeps, beside each slot, the key of a short token: one of at most 16
 * bytes without a NUL byte, whose 16 zero-padded bytes are then the token (its length is where
 * the zeros start), so a lookup compares them with the slot's key, one vector compare, without
 * loading the entry behind the slot. A slot that holds any other token has an all-zero key, which
 * no short token has (its first byte is not 0). Keys of empty slots are left from earlier scans
 * (or never written) and are not read as a match: a slot matches only if it is also set. Every
 * token of the block loop is short (printable ASCII, under 17 bytes). Entries are still written
 * for every token, for growing to the heap, which has no keys. */
typedef struct {
    uint64_t head;   /* bytes 0..7, zero-padded */
    uint64_t next;   /* bytes 8..15, zero-padded: with head and len, equality up to 16 bytes */
    uint32_t len;
    uint32_t offset; /* where the first occurrence starts */
} token_entry;
/* The AVX2 variant loads and stores head and next as one 16-byte vector. */
_Static_assert(offsetof(token_entry, next) == offsetof(token_entry, head) + 8, "head, next adjacent");

#define STACK_SLOTS QG_SCAN_INDEX_SLOTS
#define STACK_LOAD 8
#define STACK_ENTRIES (STACK_SLOTS / STACK_LOAD)
#define HEAP_LOAD 2

/* The small table's index: its slots, then the keys beside them at a fixed offset from the slots
 * (the layout of qg_scan_table), so that the block loop reaches a key from the index's address
 * without a register of its own (with one, the loop spilled to the stack). qg_scan's own for
 * short inputs, on the stack; a larger one is a qg_scan_table on the heap (72 KB, too much for
 * some threads' stacks). */
#define STACK_KEYS 256
typedef struct {
    uint16_t slots[STACK_SLOTS];
    uint8_t keys[STACK_KEYS][16];
} small_table;
#define KEYS_AT (STACK_SLOTS * sizeof(uint16_t))
_Static_assert(offsetof(qg_scan_table, keys) == KEYS_AT, "keys after the slots");
_Static_assert(offsetof(small_table, keys) == KEYS_AT, "keys after the slots");

static inline uint8_t *slot_key(uint16_t *small, size_t slot)
{
    return (uint8_t *)small + KEYS_AT + 16 * slot;
}

typedef struct {
    const uint8_t *s;
    size_t n;
    const qg_scan_rules *rules;
    const uint8_t *cls;
    qg_scan_out *out;
    int nomem;

    /* character runs being coalesced */
    int run_kind;
    size_t run_mark, run_end;

    /* context for emoji sequences and selector chains (byte offsets where a chain ends) */
    size_t chain_end, selector_end, tags_ok_end, escape_end;

    /* tokens (see token_entry for the two layouts) */
    uint16_t *small;     /* the stack index (see small_table); NULL once on the heap */
    uint32_t *slots;     /* the heap index */
    token_entry *entries; /* on the stack while small is set, else on the heap */
    size_t mask;
    size_t room; /* distinct tokens the table holds before it grows */
    uint64_t key[4]; /* the table's hash key (hash_key), fixed for the scan */
    /* n-gram runs: bit g-1 of ng_active is set while the last g or more tokens each repeat the
     * token g places back; that streak began at token index streak_start[g] (whose g-back token is
     * at streak_pos[g]). */
    int64_t best_tok;
    unsigned ng_active;
    uint32_t ng_next_id; /* the next id to hand out as of the chunk (kept until the first repeat) */
    uint64_t ng_prev[MAX_NGRAM + 1]; /* the previous chunk's match bits, per g */
    /* Not set when a scan starts: streak_start and streak_pos are written when a streak opens, ng_ids
     * and ng_pos where a token is stored (ids past the stored ones are read, by the vector
     * compares, only for bits that are masked off), and the rest before it is read. */
    int64_t streak_start[MAX_NGRAM + 1], streak_pos[MAX_NGRAM + 1];
    /* Token ids (table entry number + 1) and positions of the chunk being filled, after the
     * NG_KEEP tokens before it. Positions fit 32 bits (inputs are below QG_SCAN_MAX_BYTES): half
     * the bytes stored per token and moved per chunk than as int64_t, about 5% of the 500-token
     * scan. */
    uint32_t ng_ids[NG_KEEP + NG_CHUNK + NG_SLACK];
    uint32_t ng_pos[NG_KEEP + NG_CHUNK + NG_SLACK];
#ifdef QG_SCAN_DISPATCH
    /* For the block loop's AES hash of a token of len <= 16 bytes (hw): the mask of its first len
     * bytes, then the second round key with len in it (as in aes_token_hash). */
    uint8_t aes_len[17][2][16] __attribute__((aligned(16)));
#endif
    /* The stack table (small): its entries, kept in the scanner at fixed offsets from it so that
     * the block loop reaches them without a register of their own, and the slot of each entry in
     * the index, through which a caller's index (qg_scan_index) is cleared when the scan ends. */
    token_entry stack_entries[STACK_ENTRIES];
    uint16_t stack_used[STACK_ENTRIES];
} scanner;

static qg_mark *push_mark(scanner *st, int kind, int64_t position, int64_t count, uint32_t value)
{
    qg_scan_out *o = st->out;
    if (o->n_marks == o->cap_marks) {
        size_t cap = o->cap_marks ? o->cap_marks * 2 : 16;
        qg_mark *m = (qg_mark *)realloc(o->marks, cap * sizeof *m);
        if (!m) {
            st->nomem = 1;
            return NULL;
        }
        o->marks = m;
        o->cap_marks = cap;
    }
    qg_mark *m = &o->marks[o->n_marks++];
    m->position = position;
    m->count = count;
    m->value = value;
    m->kind = kind;
    return m;
}

/* Flag the unit s[byte .. byte+len) as `kind`, joining it to the open run when adjacent. */
static void flag(scanner *st, int kind, size_t byte, size_t len, int64_t position, uint32_t value)
{
    if (st->run_kind == kind && st->run_end == byte) {
        st->out->marks[st->run_mark].count++;
        st->run_end = byte + len;
        return;
    }
    if (!push_mark(st, kind, position, 1, value))
        return;
    st->run_kind = kind;
    st->run_mark = st->out->n_marks - 1;
    st->run_end = byte + len;
}

/* ---------------------------------------------------------------------------------------------
 * Escapes: matched at a trigger byte, left to right without overlap (escape_end). */

static int hexd(const scanner *st, size_t i) { return i < st->n && (st->cls[st->s[i]] & C_HEX); }

static int hex_run(const scanner *st, size_t i, size_t k)
{
    for (size_t j = 0; j < k; j++)
        if (!hexd(st, i + j))
            return 0;
    return 1;
}

/* Length of one character reference at s[i] == '&', or 0. */
static size_t entity_len(const scanner *st, size_t i)
{
    const uint8_t *s = st->s;
    size_t n = st->n, j = i + 1;
    if (j < n && s[j] == '#') {
        j++;
        uint8_t need = C_DIGIT;
        if (j < n && (s[j] == 'x' || s[j] == 'X')) {
            need = C_HEX;
            j++;
        }
        size_t start = j;
        while (j < n && (st->cls[s[j]] & need))
            j++;
        return (j > start && j < n && s[j] == ';') ? j + 1 - i : 0;
    }
    size_t start = j;
    while (j < n && (st->cls[s[j]] & C_ALNUM))
        j++;
    if (j == start || j >= n || s[j] != ';' || !is_entity_name(s + start, j - start))
        return 0;
    return j + 1 - i;
}

static unsigned hex_value(uint8_t c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

/* RFC 3986 unreserved characters: a URI never needs to escape them, so an escaped one is there to
 * hide text (123%2D45%2D6789). */
static int unreserved(unsigned b)
{
    return (b >= '0' && b <= '9') || ((b | 0x20) >= 'a' && (b | 0x20) <= 'z') || b == '-' ||
           b == '.' || b == '_' || b == '~';
}

/* The printf conversion letters that are hex digits (_PRINTF in the reference). */
static int printf_letter(uint8_t c)
{
    return c == 'a' || c == 'c' || c == 'd' || c == 'e' || c == 'f' || c == 'A' || c == 'E' || c == 'F';
}

static void scan_escape(scanner *st, size_t i, int64_t position)
{
    const uint8_t *s = st->s;
    size_t n = st->n, j = i;
    int64_t count = 0;
    int kind;
    if (s[i] == '%') {
        int hidden = 0;
        while (j < n && s[j] == '%' && hex_run(st, j + 1, 2)) {
            hidden |= unreserved(hex_value(s[j + 1]) << 4 | hex_value(s[j + 2]));
            j += 3;
            count++;
        }
        /* A lone printf conversion ('%4d', '%2e') untouched by letters and digits hides nothing
         * (_printf_conversion in the reference). */
        if (hidden && count == 1 && (st->cls[s[i + 1]] & C_DIGIT) && printf_letter(s[i + 2]) &&
            !(i > 0 && (st->cls[s[i - 1]] & C_ALNUM)) && !(j < n && (st->cls[s[j]] & C_ALNUM)))
            hidden = 0;
        kind = QG_K_PERCENT;
        if (count && (st->rules->min_percent_run < 0 ||
                      (count < st->rules->min_percent_run && !hidden))) {
            st->escape_end = j;
            return;
        }
    } else if (s[i] == '\\') {
        while (j + 1 < n && s[j] == '\\' && s[j + 1] == 'x' && hex_run(st, j + 2, 2)) {
            j += 4;
            count++;
        }
        kind = QG_K_HEX_ESCAPE;
        if (!count) {
            for (;;) {
                if (j + 1 < n && s[j] == '\\' && s[j + 1] == 'u' && hex_run(st, j + 2, 4))
                    j += 6;
                else if (j + 1 < n && s[j] == '\\' && s[j + 1] == 'U' && hex_run(st, j + 2, 8))
                    j += 10;
                else
                    break;
                count++;
            }
            kind = QG_K_UNICODE_ESCAPE;
        }
    } else {
        size_t len;
        while (j < n && s[j] == '&' && (len = entity_len(st, j)) != 0) {
            j += len;
            count++;
        }
        kind = QG_K_HTML;
    }
    if (count) {
        st->escape_end = j;
        push_mark(st, kind, position, count, 0);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Tokens */

/* The high and low halves of the 128-bit product, folded: every bit of the result depends on
 * every bit of both operands. */
static inline uint64_t fold_mul(uint64_t a, uint64_t b)
{
#ifdef __SIZEOF_INT128__
    unsigned __int128 p = (unsigned __int128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
#else
    uint64_t a0 = a & 0xFFFFFFFFu, a1 = a >> 32, b0 = b & 0xFFFFFFFFu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xFFFFFFFFu) + (p10 & 0xFFFFFFFFu);
    uint64_t lo = (mid << 32) | (p00 & 0xFFFFFFFFu);
    uint64_t hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
    return lo ^ hi;
#endif
}

/* The process's table key: 32 bytes from the OS on first use. Racing first calls may each publish
 * a key; a scan reads the key once and uses it throughout, so every scan is consistent. Without OS
 * randomness (never on Linux) the key falls back to the clock and an address: still exact, only
 * easier to predict. */
static void hash_key(uint64_t key[4])
{
    static uint64_t global[4];
    static int ready = 0;
    if (__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (int j = 0; j < 4; j++)
            key[j] = __atomic_load_n(&global[j], __ATOMIC_RELAXED);
        return;
    }
    uint64_t k[4] = {0, 0, 0, 0};
    int ok = 0;
#ifdef QG_SCAN_TEST_KEY
    /* Test builds only (tests/c/scan_probes.c): the key from QG_SCAN_KEY, four hex words, so a test
     * can replay a key that once made the table cluster. The extension never defines this. */
    const char *fixed = getenv("QG_SCAN_KEY");
    ok = fixed && sscanf(fixed, "%" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx64, &k[0], &k[1], &k[2], &k[3]) == 4;
    if (!ok) {
#endif
#if defined(__linux__)
        ok = getrandom(k, sizeof k, 0) == (ssize_t)sizeof k;
#elif defined(__APPLE__) || defined(__FreeBSD__) || defined(__OpenBSD__) || defined(__NetBSD__)
        arc4random_buf(k, sizeof k);
        ok = 1;
#endif
#ifdef QG_SCAN_TEST_KEY
    }
#endif
    if (!ok) {
        k[0] = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
        k[1] = (uint64_t)(uintptr_t)&k ^ (uint64_t)clock();
        k[2] = k[0] ^ 0xD6E8FEB86659FD93ull;
        k[3] = k[1] * 0x9E3779B97F4A7C15ull;
    }
    for (int j = 0; j < 4; j++)
        __atomic_store_n(&global[j], k[j], __ATOMIC_RELAXED);
    __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    for (int j = 0; j < 4; j++)
        key[j] = k[j];
}

/* The bytes p[0..len), 1 <= len <= 8, zero-padded into a word. */
static inline uint64_t load_word(const uint8_t *p, size_t len, const uint8_t *end)
{
    uint64_t w = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (end - p >= 8) {
        memcpy(&w, p, 8);
        return w & (~0ull >> (64 - 8 * len)); /* len 1..8: a shift of 0..56 */
    }
#else
    (void)end;
#endif
    memcpy(&w, p, len);
    return w;
}

/* Runs this long or longer are decoded (hex_text, base64_text) whatever min_blob_len says. */
#define DECODE_MIN 12

static int printable(unsigned b) { return b >= 0x20 && b <= 0x7E; }

/* Whether the hex digits r[0..len) spell printable ASCII: an even length of at least 16 (24 when
 * all are decimal digits, so that few long numbers qualify). */
static int hex_text(const uint8_t *r, size_t len, int digits_only)
{
    if (len % 2 || len < (digits_only ? 24u : 16u))
        return 0;
    for (size_t k = 0; k < len; k += 2)
        if (!printable(hex_value(r[k]) << 4 | hex_value(r[k + 1])))
            return 0;
    return 1;
}

static unsigned b64_value(uint8_t c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : 63;
}

/* Whether r[0..len) is shaped like a word: letters only, and all lower-case, all upper-case, or
 * one capital then lower-case (_WORD in the reference). */
static int word_shaped(const uint8_t *r, size_t len)
{
    int lower = 0, upper_later = 0;
    for (size_t k = 0; k < len; k++) {
        unsigned c = r[k];
        if (c >= 'a' && c <= 'z')
            lower = 1;
        else if (c >= 'A' && c <= 'Z')
            upper_later |= k > 0;
        else
            return 0;
    }
    return !(lower && upper_later);
}

/* Whether the base64 run r[0..len) decodes to printable ASCII (len % 4 == 1 decodes to nothing;
 * bits left over at the end are ignored, as by base64 decoders). A run shaped like a word is never
 * decoded: a few English words decode to printable bytes ("enchantments"). */
static int base64_text(const uint8_t *r, size_t len)
{
    if (len < DECODE_MIN || len % 4 == 1 || word_shaped(r, len))
        return 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t k = 0; k < len; k++) {
        acc = (acc << 6 | b64_value(r[k])) & 0xFFFFFF;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (!printable((acc >> bits) & 0xFF))
                return 0;
        }
    }
    return 1;
}

/* Whether p[0..len) is a word that scan_blobs passes over when len < min_blob_len: ASCII letters
 * only (so one run, and no 0x prefix) and shaped like a word (so not base64 text); its hex digits,
 * if all are, are letters a-f, whose pairs decode to bytes >= 0xA0 (so not hex text). That is most
 * long tokens of prose ("infrastructure"), which otherwise cost the byte loops below. avail: bytes
 * readable from p. 0 means "not known": scan_blobs decides. */
static inline int word_token16(const uint8_t *p, size_t len, size_t avail)
{
#ifdef QG_SCAN_SSE2
    if (len > 16 || avail < 16)
        return 0;
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i lower = _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8((char)(0x80 - 'a'))),
                                   _mm_set1_epi8((char)(-128 + 26)));
    __m128i upper = _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8((char)(0x80 - 'A'))),
                                   _mm_set1_epi8((char)(-128 + 26)));
    unsigned in = (1u << len) - 1;
    unsigned lo = (unsigned)_mm_movemask_epi8(lower) & in, up = (unsigned)_mm_movemask_epi8(upper) & in;
    return (lo | up) == in && !(lo && (up & ~1u));
#else
    (void)p;
    (void)len;
    (void)avail;
    return 0;
#endif
}

/* Blob runs inside one token s[a..b) (runs never cross whitespace). */
static void scan_blobs(scanner *st, size_t a, size_t b, int64_t position)
{
    const uint8_t *s = st->s;
    int64_t min_len = st->rules->min_blob_len;
    if ((int64_t)(b - a) < min_len && word_token16(s + a, b - a, st->n - a))
        return;
    size_t i = a;
    while (i < b) {
        if (!(st->cls[s[i]] & C_B64)) {
            if (!st->rules->str_input || (s[i] & 0xC0) != 0x80)
                position++;
            i++;
            continue;
        }
        size_t start = i;
        unsigned all = 0xFF, any = 0;
        while (i < b && (st->cls[s[i]] & C_B64)) {
            all &= st->cls[s[i]];
            any |= st->cls[s[i]];
            i++;
        }
        size_t len = i - start;
        if ((int64_t)len >= min_len || len >= DECODE_MIN) {
            int upper = 0, lower = 0, symbol = 0;
            if ((int64_t)len >= min_len)
                for (size_t k = start; k < i; k++) {
                    upper |= s[k] >= 'A' && s[k] <= 'Z';
                    lower |= s[k] >= 'a' && s[k] <= 'z';
                    symbol |= !(st->cls[s[k]] & C_ALNUM);
                }
            int kind = 0;
            /* The hex digits: the run, or what follows a 0x / 0X prefix. */
            const uint8_t *h = s + start;
            size_t hlen = len;
            int hex = (all & C_HEX) != 0, hdigit = (any & C_DIGIT) != 0, hletter = !(all & C_DIGIT);
            if (!hex && len > 2 && h[0] == '0' && (h[1] | 0x20) == 'x' && hex_run(st, start + 2, len - 2)) {
                h += 2;
                hlen -= 2;
                hex = 1;
                hdigit = hletter = 0;
                for (size_t k = 0; k < hlen; k++) {
                    hdigit |= (st->cls[h[k]] & C_DIGIT) != 0;
                    hletter |= !(st->cls[h[k]] & C_DIGIT);
                }
            }
            if (hex && (((int64_t)hlen >= min_len && hdigit && hletter) || hex_text(h, hlen, !hletter)))
                kind = QG_K_HEXBLOB;
            else if (((int64_t)len >= min_len && ((any & C_DIGIT) || symbol) && upper && lower) ||
                     base64_text(s + start, len))
                kind = QG_K_BASE64;
            if (kind)
                push_mark(st, kind, position, (int64_t)len, 0);
        }
        position += (int64_t)len;
    }
}

/* The streak of tokens equal to the token g places back, begun at token streak_start[g], ended at
 * token k: it covers (k - start) + g tokens, and only streaks of at least two full copies are
 * ever opened (ngram_chunk), so every one counts. The longest run
 * wins, then the earliest, then the smallest g; a streak's final length is its largest, so judging
 * streaks when they end picks what judging them after every token would. */
static void end_streak(scanner *st, int64_t g, int64_t k)
{
    qg_scan_out *o = st->out;
    int64_t matches = k - st->streak_start[g]; /* >= g: see ngram_chunk */
    int64_t len = matches + g, at = st->streak_start[g] - g;
    if (len > o->run_length ||
        (len == o->run_length && (at < st->best_tok || (at == st->best_tok && g < o->run_n)))) {
        o->run_length = len;
        o->run_n = g;
        o->run_at = st->streak_pos[g];
        st->best_tok = at;
    }
}

/* eq[g] bit j: token j of the chunk equals the token g places back (ids[j] == ids[j-g]); ids[-NG_KEEP
 * .. 64) are readable. Bits at and past `count` are garbage (the caller masks them). */
static void match_bits(const uint32_t *ids, unsigned count, uint64_t eq[MAX_NGRAM + 1])
{
    for (int g = 1; g <= MAX_NGRAM; g++) {
        uint64_t m = 0;
        for (unsigned j = 0; j < count; j++)
            m |= (uint64_t)(ids[j] == ids[(int)j - g]) << j;
        eq[g] = m;
    }
}

#ifdef QG_SCAN_DISPATCH
__attribute__((target("avx2"))) static void match_bits_avx2(const uint32_t *ids, unsigned count,
                                                             uint64_t eq[MAX_NGRAM + 1])
{
    (void)count;
    for (int g = 1; g <= MAX_NGRAM; g++) {
        uint64_t m = 0;
        for (unsigned j = 0; j < NG_CHUNK; j += 8) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(ids + j));
            __m256i y = _mm256_loadu_si256((const __m256i *)(ids + j - g));
            m |= (uint64_t)(uint8_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x, y)))
                 << j;
        }
        eq[g] = m;
    }
}

/* match_bits_avx2 for ids below 0xFFFF (the sentinels before the first token saturate to 0xFFFF,
 * equal to each other but to no real id, and are only ever compared with real ids): packed to 16
 * bits, twice the ids per compare, and the compare masks packed to bytes before they are
 * extracted. */
__attribute__((target("avx2"))) static void match_bits_avx2_narrow(const uint32_t *ids,
                                                                    uint64_t eq[MAX_NGRAM + 1])
{
    uint16_t w[NG_KEEP + NG_CHUNK] __attribute__((aligned(32)));
    const uint32_t *src = ids - NG_KEEP;
    for (int k = 0; k < NG_KEEP + NG_CHUNK; k += 16) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(src + k));
        __m256i hi = _mm256_loadu_si256((const __m256i *)(src + k + 8));
        /* packus works within 128-bit lanes: the permute puts the 16 words back in order. */
        _mm256_store_si256((__m256i *)(w + k),
                           _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8));
    }
    const uint16_t *x = w + NG_KEEP;
    __m256i x0 = _mm256_load_si256((const __m256i *)x), x1 = _mm256_load_si256((const __m256i *)(x + 16));
    __m256i x2 = _mm256_load_si256((const __m256i *)(x + 32)), x3 = _mm256_load_si256((const __m256i *)(x + 48));
    for (int g = 1; g <= MAX_NGRAM; g++) {
        __m256i c0 = _mm256_cmpeq_epi16(x0, _mm256_loadu_si256((const __m256i *)(x - g)));
        __m256i c1 = _mm256_cmpeq_epi16(x1, _mm256_loadu_si256((const __m256i *)(x + 16 - g)));
        __m256i c2 = _mm256_cmpeq_epi16(x2, _mm256_loadu_si256((const __m256i *)(x + 32 - g)));
        __m256i c3 = _mm256_cmpeq_epi16(x3, _mm256_loadu_si256((const __m256i *)(x + 48 - g)));
        uint32_t m01 = (uint32_t)_mm256_movemask_epi8(
            _mm256_permute4x64_epi64(_mm256_packs_epi16(c0, c1), 0xD8));
        uint32_t m23 = (uint32_t)_mm256_movemask_epi8(
            _mm256_permute4x64_epi64(_mm256_packs_epi16(c2, c3), 0xD8));
        eq[g] = m01 | (uint64_t)m23 << 32;
    }
}
/* match_bits_avx2_narrow for ids below 0xFF (at most 254 distinct tokens so far, as in most
 * queries): packed to bytes, 32 ids per compare. The sentinels before the first token saturate to
 * 0 (negative as int32), which no real id is. Reads the ids up to ids[80) (ng_ids has NG_SLACK
 * more); those past the chunk only make bits the caller masks off. */
__attribute__((target("avx2"))) static void match_bits_avx2_byte(const uint32_t *ids,
                                                                  uint64_t eq[MAX_NGRAM + 1])
{
    const uint32_t *src = ids - NG_KEEP;
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i w[3];
    for (int k = 0; k < 3; k++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + 32 * k));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + 32 * k + 8));
        __m256i c = _mm256_loadu_si256((const __m256i *)(src + 32 * k + 16));
        __m256i d = _mm256_loadu_si256((const __m256i *)(src + 32 * k + 24));
        /* Within 128-bit lanes: a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7, in 4-byte groups. */
        __m256i abcd = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));
        w[k] = _mm256_permutevar8x32_epi32(abcd, order);
    }
    /* w[k] holds ids[32k - 16 .. 32k + 16): the chunk's 64 ids are the middle of w[0..3), and the
     * ids g back are shifted out of the same registers (alignr shifts within 128-bit lanes, so each
     * pairs a vector with the one starting 16 ids earlier) instead of stored and read back at an
     * offset, which no store forwards. */
    __m256i x0 = _mm256_permute2x128_si256(w[0], w[1], 0x21), x1 = _mm256_permute2x128_si256(w[1], w[2], 0x21);
#define EQ_G(g)                                                                                    \
    eq[g] = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(x0, _mm256_alignr_epi8(x0, w[0], 16 - (g)))) | \
            (uint64_t)(uint32_t)_mm256_movemask_epi8(                                              \
                _mm256_cmpeq_epi8(x1, _mm256_alignr_epi8(x1, w[1], 16 - (g)))) << 32
    EQ_G(1);
    EQ_G(2);
    EQ_G(3);
    EQ_G(4);
    EQ_G(5);
    EQ_G(6);
    EQ_G(7);
    EQ_G(8);
#undef EQ_G
}
#endif


/* The n-gram streaks of one chunk: `count` tokens from token index `base`, ids and positions in
 * st->ng_ids/ng_pos after the NG_KEEP tokens before them. `full` bit j says that tokens j-g+1 .. j
 * all repeat the token g places back: the streak of size g has reached the g matches that make two
 * full copies. It becomes full g-1 tokens after it began and ends at the first token that breaks
 * it. Streaks that never get full cannot count, and in ordinary text most chance matches are such;
 * so for each g the common case is a few word operations, and only the rare transitions of `full`
 * cost a branch. Judging a chunk at a time, instead of a token at a time, takes the streak
 * bookkeeping out of the per-token path. */
static void ngram_chunk(scanner *st, unsigned count, int64_t base, int64_t unique, int hw)
{
    const uint32_t *ids = st->ng_ids + NG_KEEP;
    const uint32_t *pos = st->ng_pos + NG_KEEP;
    /* Two per-token checks that only ever fire once, done here instead: the token that reaches the
     * cap, and the first repeated token (ids are handed out in first-seen order, so a token is new
     * exactly when its id is the next unused one). */
    int64_t cap = st->rules->max_tokens;
    if (cap >= base && cap < base + (int64_t)count)
        st->out->token_cap_at = pos[cap - base];
    if (st->out->first_repeat < 0) {
        for (unsigned j = 0; j < count; j++) {
            if (ids[j] != st->ng_next_id) {
                st->out->first_repeat = pos[j];
                break;
            }
            st->ng_next_id++;
        }
    }
    uint64_t eqs[MAX_NGRAM + 1];
#ifdef QG_SCAN_DISPATCH
    if (hw && unique < 0xFF)
        match_bits_avx2_byte(ids, eqs);
    else if (hw && unique < 0xFFFF)
        match_bits_avx2_narrow(ids, eqs);
    else if (hw)
        match_bits_avx2(ids, count, eqs);
    else
#endif
        match_bits(ids, count, eqs);
    (void)hw;
    (void)unique;
    uint64_t live = count >= 64 ? ~0ull : (1ull << count) - 1;
    /* A streak of g >= 2 needs two matches in a row (below: full). In ordinary text no chunk has
     * any, nor an open streak: then, after one pass over the masks without a branch, only g = 1
     * is looked at. */
    uint64_t pairs = 0;
    for (int g = 2; g <= MAX_NGRAM; g++) {
        uint64_t eq = eqs[g] & live;
        pairs |= eq & ((eq << 1) | (st->ng_prev[g] >> 63));
    }
    int last_g = (pairs | (st->ng_active >> 1)) ? MAX_NGRAM : 1;
    for (int g = last_g + 1; g <= MAX_NGRAM; g++)
        st->ng_prev[g] = eqs[g] & live;
    for (int g = 1; g <= last_g; g++) {
        uint64_t eq = eqs[g] & live, prev = st->ng_prev[g];
        st->ng_prev[g] = eq;
        unsigned bit = 1u << (g - 1), open = (st->ng_active & bit) != 0;
        /* full needs a match and, for g > 1, the one before it: in ordinary text that rules out
         * every g > 1 at once. */
        uint64_t full = g == 1 ? eq : eq & ((eq << 1) | (prev >> 63));
        if (!(full | open))
            continue;
        for (int i = 2; i < g; i++)
            full &= (eq << i) | (prev >> (64 - i));
        if (!(full | open))
            continue;
        uint64_t turns = (full ^ ((full << 1) | open)) & live;
        while (turns) {
            unsigned j = (unsigned)__builtin_ctzll(turns);
            turns &= turns - 1;
            int64_t k = base + j;
            if (full >> j & 1) {
                st->streak_start[g] = k - g + 1;
                st->streak_pos[g] = pos[(int)j - 2 * g + 1];
                st->ng_active |= bit;
            } else {
                end_streak(st, g, k);
                st->ng_active &= ~bit;
            }
        }
    }
    /* Keep the last NG_KEEP ids and positions of a full chunk, and the up to NG_SLACK tokens
     * stored after it, in front of the next chunk (copied at the largest size: a constant size
     * is a few vector moves, a variable one a library call). The last chunk has no next. */
    if (count == NG_CHUNK) {
        memcpy(st->ng_ids, st->ng_ids + NG_CHUNK, (NG_KEEP + NG_SLACK) * sizeof st->ng_ids[0]);
        memcpy(st->ng_pos, st->ng_pos + NG_CHUNK, (NG_KEEP + NG_SLACK) * sizeof st->ng_pos[0]);
    }
}

/* A token's first min(len, 16) bytes, zero-padded, into head and next, from 16 readable bytes at p
 * (little-endian): two unaligned loads masked without a branch on the token length, which varies
 * unpredictably from token to token. */
typedef struct {
    uint64_t head, next;
} head16;

static inline __attribute__((always_inline)) head16 head_next16(const uint8_t *p, size_t len)
{
    size_t first = len < 8 ? len : 8, more = len > 8 ? len - 8 : 0;
    head16 w;
    memcpy(&w.head, p, 8);
    memcpy(&w.next, p + 8, 8);
    w.head &= ~0ull >> (64 - 8 * first); /* first 1..8: a shift of 0..56 */
    w.next &= more >= 8 ? ~0ull : (1ull << (8 * more)) - 1;
    return w;
}

/* Tokens up to 16 bytes hash without a length-dependent branch. The length joins the second
 * operand: with the zero padding, (head, next, length) is the token. For a short token that
 * operand is the same for every token of its length, and one folded multiply by such a constant
 * clusters ids like u0000001, u0000002 badly for some keys (13 slots stepped per token at worst
 * over 200 keys); the second, fixed multiply spreads them like random words for every key tried. */
static inline uint64_t token_hash16(const uint64_t key[4], uint64_t head, uint64_t next, size_t len)
{
    return fold_mul(fold_mul(head ^ key[0], next ^ key[1] ^ (uint64_t)len), 0x9E3779B97F4A7C15ull);
}

/* token_hash16, then one folded multiply per further 8 bytes and a fixed one to finish. The finish
 * is the short tokens' lesson again: the tail multiplies are by a key-derived constant, and for
 * about 1 key in 130 that alone clustered URLs differing only in their last digits (up to 8 slots
 * stepped per token; tests/test_scan_table.py replays such keys). */
static inline uint64_t token_hash(const uint64_t key[4], const uint8_t *s, size_t a, size_t b,
                                  uint64_t head, uint64_t next, const uint8_t *end)
{
    uint64_t h = token_hash16(key, head, next, b - a);
    if (b - a <= 16)
        return h;
    for (size_t p = a + 16; p < b; p += 8)
        h = fold_mul(h ^ load_word(s + p, b - p < 8 ? b - p : 8, end), key[1] ^ 0x9E3779B97F4A7C15ull);
    return fold_mul(h, 0x9E3779B97F4A7C15ull);
}

#ifdef QG_SCAN_DISPATCH
/* The AVX2 variant's token hash: the token's first 16 bytes (zero-padded, as in head and next) and
 * its length through three AES rounds under round keys from the OS (hash_key), one more round per
 * further 16 bytes. Two rounds already make every byte of the state depend on every input byte;
 * the third is margin. AES-NI does a round in one instruction, so this costs a fraction of the two
 * folded 64 x 64 multiplies and the length-dependent masks of token_hash (bench/scan_floor.py: the
 * bare lookup of the benchmark query's 500 tokens takes 1.5 us instead of 2.6 us). A different
 * hash only moves tokens between slots: ids, counts and every figure stay exactly the same. */
static const uint8_t aes_masks[17][16] __attribute__((aligned(16))) = {
#define M(k) {(0 < k) * 255, (1 < k) * 255, (2 < k) * 255, (3 < k) * 255, (4 < k) * 255, (5 < k) * 255, \
              (6 < k) * 255, (7 < k) * 255, (8 < k) * 255, (9 < k) * 255, (10 < k) * 255,          \
              (11 < k) * 255, (12 < k) * 255, (13 < k) * 255, (14 < k) * 255, (15 < k) * 255}
    M(0), M(1), M(2), M(3), M(4), M(5), M(6), M(7), M(8), M(9), M(10), M(11), M(12), M(13), M(14),
    M(15), M(16)
#undef M
};

/* Bytes p[0..len), len <= 16, zero-padded into a vector; reads 16 bytes when that stays in s. */
__attribute__((target("avx2,aes"), noinline)) static __m128i load16_copy(const uint8_t *p, size_t len)
{
    uint8_t tmp[16] = {0};
    memcpy(tmp, p, len);
    return _mm_loadu_si128((const __m128i *)tmp);
}

__attribute__((target("avx2,aes"))) static inline __m128i load16(const uint8_t *p, size_t len,
                                                                const uint8_t *end)
{
    if (__builtin_expect(end - p >= 16, 1))
        return _mm_and_si128(_mm_loadu_si128((const __m128i *)p),
                             _mm_load_si128((const __m128i *)aes_masks[len]));
    return load16_copy(p, len);
}

__attribute__((target("avx2,aes"))) static inline uint64_t aes_token_hash(const uint64_t key[4],
                                                                          const uint8_t *s, size_t a,
                                                                          size_t b, __m128i first,
                                                                          const uint8_t *end)
{
    const __m128i k0 = _mm_set_epi64x((long long)key[1], (long long)key[0]);
    const __m128i k1 = _mm_set_epi64x((long long)key[3], (long long)key[2]);
    __m128i x = _mm_aesenc_si128(_mm_xor_si128(first, k0), _mm_xor_si128(k1, _mm_cvtsi64_si128((long long)(b - a))));
    if (__builtin_expect(b - a > 16, 0))
        for (size_t p = a + 16; p < b; p += 16)
            x = _mm_aesenc_si128(_mm_xor_si128(x, load16(s + p, b - p < 16 ? b - p : 16, end)), k0);
    x = _mm_aesenc_si128(x, k0);
    x = _mm_aesenc_si128(x, k1);
    return (uint64_t)_mm_cvtsi128_si64(x);
}
#endif

/* The hash the pass uses: aes_token_hash in the AVX2 variant (hw), token_hash otherwise. */
static uint64_t entry_hash(const uint64_t key[4], const uint8_t *s, const uint8_t *end, size_t a, size_t b,
                           uint64_t head, uint64_t next, int hw)
{
#ifdef QG_SCAN_DISPATCH
    if (hw)
        return aes_token_hash(key, s, a, b, load16(s + a, b - a < 16 ? b - a : 16, end), end);
#endif
    (void)hw;
    return token_hash(key, s, a, b, head, next, end);
}

/* Move to the heap with room for `tokens` distinct tokens, rehashing what is there. */
static int grow_table(scanner *st, size_t tokens, size_t unique, int hw)
{
    size_t cap = HEAP_LOAD * tokens;
    uint32_t *slots = (uint32_t *)calloc(cap, sizeof *slots);
    token_entry *entries = (token_entry *)malloc(tokens * sizeof *entries);
    if (!slots || !entries) {
        free(slots);
        free(entries);
        return 0;
    }
    memcpy(entries, st->entries, unique * sizeof *entries);
    for (size_t id = 0; id < unique; id++) {
        const token_entry *e = &entries[id];
        size_t slot = (size_t)entry_hash(st->key, st->s, st->s + st->n, e->offset, e->offset + e->len,
                                         e->head, e->next, hw) & (cap - 1);
        while (slots[slot])
            slot = (slot + 1) & (cap - 1);
        slots[slot] = (uint32_t)id + 1;
    }
    free(st->slots);
    if (!st->small)
        free(st->entries);
    st->small = NULL;
    st->slots = slots;
    st->entries = entries;
    st->mask = cap - 1;
    st->room = tokens;
    return 1;
}


/* What every token updates, kept in a local of the pass so that it lives in registers (the build
 * has -fno-strict-aliasing, so anything reachable through a pointer is reloaded after every store
 * to the table). Synced with the scanner and the output only on rare events and at the end. */
typedef struct {
    uint16_t *small; /* the stack index, or NULL */
    uint32_t *slots;
    token_entry *entries;
    size_t mask, room;
    uint64_t key[4];
    int64_t unique, model, probes;
    int64_t ng_base; /* the token index of ng_ids[NG_KEEP]; tokens so far: ng_base + ng_n - NG_KEEP */
    unsigned ng_n;   /* ids stored in ng_ids (see ngram_chunk) */
    /* rules, as limits that need one compare */
    int64_t model_cap;   /* INT64_MAX: off or already reported */
    size_t blob_min;     /* SIZE_MAX: blobs off */
    size_t blob_scan;    /* tokens this long or longer are scanned for blobs: min(blob_min, DECODE_MIN) */
    size_t out_len;      /* tokens this long or longer leave fast_tokens: min(blob_min, 17) */
    size_t fast_len;     /* min(blob_scan, out_len): tokens this long or longer leave the fast
                          * path (to token_body from out_len, else only to scan_blobs) */
} hot_state;

/* Judge the full chunk of NG_CHUNK tokens in front of the NG_KEEP kept ones. */
static void ng_flush(scanner *st, hot_state *h, int hw)
{
    ngram_chunk(st, NG_CHUNK, h->ng_base, h->unique, hw);
    h->ng_base += NG_CHUNK;
    h->ng_n -= NG_CHUNK;
}

static inline __attribute__((always_inline)) void
token_body(scanner *st, hot_state *h, size_t a, size_t b, int64_t position, int64_t letters,
           int64_t other_ascii, int64_t non_ascii, int hw)
{
    const uint8_t *s = st->s, *end = st->s + st->n;
    h->model += (int64_t)(((uint64_t)letters + 3) >> 2) + other_ascii + non_ascii;
    if (h->model > h->model_cap) {
        st->out->model_cap_at = position;
        h->model_cap = INT64_MAX;
    }

    size_t len = b - a;
    uint64_t head = 0, next = 0, hash;
#ifdef QG_SCAN_DISPATCH
    /* The AVX2 variant keeps the first 16 bytes in a vector: hashed, compared and stored as one. */
    __m128i v = _mm_setzero_si128();
    if (hw) {
        v = load16(s + a, len < 16 ? len : 16, end);
        hash = aes_token_hash(h->key, s, a, b, v, end);
    } else
#endif
    {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (end - s >= (ptrdiff_t)(a + 16)) {
            head16 w = head_next16(s + a, len);
            head = w.head;
            next = w.next;
        } else
#endif
        {
            head = load_word(s + a, len < 8 ? len : 8, end);
            if (len > 8)
                next = load_word(s + a + 8, len < 16 ? len - 8 : 8, end);
        }
        hash = token_hash(h->key, s, a, b, head, next, end);
    }
#ifdef QG_SCAN_DISPATCH
#define SAME_HEAD(e)                                                                               \
    (hw ? (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)&(e)->head), v)) ==   \
           0xFFFF) & ((e)->len == len)                                                             \
        : ((((e)->len ^ len) | ((e)->head ^ head) | ((e)->next ^ next)) == 0))
#else
#define SAME_HEAD(e) ((((e)->len ^ len) | ((e)->head ^ head) | ((e)->next ^ next)) == 0)
#endif
    size_t slot = (size_t)hash & h->mask;
    token_entry *e;
    uint32_t tid;
    if (h->small) {
        /* A short token (see token_entry) is matched by its key, any other by its entry. */
        const int short_token = len <= 16 && !memchr(s + a, 0, len);
        uint64_t key[2] = {0, 0};
        if (short_token) {
#ifdef QG_SCAN_DISPATCH
            if (hw)
                _mm_storeu_si128((__m128i *)key, v);
            else
#endif
            {
                key[0] = head;
                key[1] = next;
            }
        }
        for (;;) {
            unsigned id = h->small[slot];
            if (id == 0) {
                if ((size_t)h->unique < h->room) {
                    h->small[slot] = (uint16_t)(h->unique + 1);
                    memcpy(slot_key(h->small, slot), key, 16);
                    st->stack_used[h->unique] = (uint16_t)slot;
                    tid = (uint32_t)h->unique;
                    e = &h->entries[tid];
                    goto insert;
                }
                break;
            }
            tid = id - 1;
            e = &h->entries[tid];
            if (short_token ? memcmp(slot_key(h->small, slot), key, 16) == 0
                            : SAME_HEAD(e) &&
                                  (len <= 16 || memcmp(s + e->offset + 16, s + a + 16, len - 16) == 0))
                goto found;
            slot = (slot + 1) & h->mask;
            h->probes++;
        }
        /* The stack is full: move to the heap and look up there. */
        if (!grow_table(st, 2 * h->room, (size_t)h->unique, hw))
            goto nomem;
        h->small = NULL;
        h->slots = st->slots;
        h->entries = st->entries;
        h->mask = st->mask;
        h->room = st->room;
        slot = (size_t)hash & h->mask;
    }
    for (;;) {
        uint32_t id = h->slots[slot];
        if (id == 0) {
            if ((size_t)h->unique == h->room) {
                if (!grow_table(st, 2 * h->room, (size_t)h->unique, hw))
                    goto nomem;
                h->slots = st->slots;
                h->entries = st->entries;
                h->mask = st->mask;
                h->room = st->room;
                slot = (size_t)hash & h->mask;
                continue;
            }
            h->slots[slot] = (uint32_t)h->unique + 1;
            tid = (uint32_t)h->unique;
            e = &h->entries[tid];
            goto insert;
        }
        tid = id - 1;
        e = &h->entries[tid];
        if (SAME_HEAD(e) &&
            (len <= 16 || memcmp(s + e->offset + 16, s + a + 16, len - 16) == 0))
            goto found;
        slot = (slot + 1) & h->mask;
        h->probes++;
    }

nomem:
    st->nomem = 1;
    return;

insert:
    h->unique++;
#ifdef QG_SCAN_DISPATCH
    if (hw)
        _mm_storeu_si128((__m128i *)&e->head, v);
    else
#endif
    {
        e->head = head;
        e->next = next;
    }
    e->len = (uint32_t)len;
    e->offset = (uint32_t)a;
    goto done;

found:
done:
#undef SAME_HEAD
    st->ng_ids[h->ng_n] = tid + 1;
    st->ng_pos[h->ng_n] = (uint32_t)position;
    if (++h->ng_n >= NG_KEEP + NG_CHUNK)
        ng_flush(st, h, hw);
    if (len >= h->blob_scan)
        scan_blobs(st, a, b, position);
}

/* ---------------------------------------------------------------------------------------------
 * Non-ASCII code points that are not whitespace. */

static void classify(scanner *st, uint32_t cp, size_t i, int len, int64_t position)
{
    if (cp < 0xA0) {
        flag(st, QG_K_CONTROL, i, len, position, cp);
        return;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) {
        flag(st, QG_K_SURROGATE, i, len, position, cp);
        return;
    }
    if (cp == 0x61C || cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
        (cp >= 0x2066 && cp <= 0x2069)) {
        flag(st, QG_K_BIDI, i, len, position, cp);
        return;
    }
    if (cp == 0xAD || cp == 0x180E || cp == 0x200B || cp == 0x200C || (cp >= 0x2060 && cp <= 0x2064) ||
        (cp >= 0x206A && cp <= 0x206F)) {
        flag(st, QG_K_INVISIBLE, i, len, position, cp);
        return;
    }
    if (cp == 0x200D) {
        uint32_t next;
        int ok = st->chain_end == i && i + 3 < st->n &&
                 decode(st->s, st->n, i + 3, st->rules->str_input, &next) &&
                 is_extended_pictographic(next);
        if (!ok)
            flag(st, QG_K_INVISIBLE, i, len, position, cp);
        return;
    }
    if (cp == 0xFEFF) {
        if (i != 0)
            flag(st, QG_K_INVISIBLE, i, len, position, cp);
        return;
    }
    if (cp >= 0xE0000 && cp <= 0xE007F) {
        if (i >= st->tags_ok_end)
            flag(st, QG_K_INVISIBLE, i, len, position, cp);
        return;
    }
    if (is_selector(cp)) {
        if (st->selector_end == i)
            flag(st, QG_K_INVISIBLE, i, len, position, cp);
        st->selector_end = i + len;
        if (cp == 0xFE0F && st->chain_end == i)
            st->chain_end = i + len;
        return;
    }
    if (cp >= 0x1F3FB && cp <= 0x1F3FF) {
        if (st->chain_end == i)
            st->chain_end = i + len;
        return;
    }
    if (is_extended_pictographic(cp)) {
        st->chain_end = i + len;
        if (cp == 0x1F3F4 && st->n - (i + len) >= 24) {
            for (int f = 0; f < 3; f++)
                if (memcmp(st->s + i + len, rgi_tags[f], 24) == 0)
                    st->tags_ok_end = i + len + 24;
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * The pass
 *
 * The text is read 64 bytes at a time. Three bit masks per block (SIMD compares where available)
 * say which bytes are plain whitespace (space, TAB, LF, CR), which are ASCII letters/digits, and
 * which need the byte-at-a-time path: controls and other whitespace, DEL, non-ASCII bytes and (with
 * encoded_payloads) the escape triggers % \ &. Up to the first such byte, token boundaries come
 * from the whitespace mask with bit scans and letters are counted by popcount; from that byte the
 * general path takes over for a while, then hands back. Both paths feed the same token_body, so the
 * figures do not depend on which path saw a byte. */

#define FAST_WS 1u   /* space, TAB, LF, CR: whitespace that is never flagged */
#define FAST_SLOW 2u /* controls, other ASCII whitespace, DEL, non-ASCII: the general path */
#define FAST_TRIG 4u /* % \ &: the general path when escapes are checked */
#define FAST_ALNUM 8u

typedef struct {
    uint64_t ws, slow, alnum;
} block_masks;

static inline unsigned fast_class(unsigned b)
{
    if (b == ' ' || b == '\t' || b == '\n' || b == '\r')
        return FAST_WS;
    if (b < 0x20 || b >= 0x7F)
        return FAST_SLOW;
    if (b == '%' || b == '\\' || b == '&')
        return FAST_TRIG;
    if ((b >= '0' && b <= '9') || ((b | 0x20) >= 'a' && (b | 0x20) <= 'z'))
        return FAST_ALNUM;
    return 0;
}

#ifdef QG_SCAN_SSE2
static inline void masks16(__m128i v, __m128i trig_on, uint64_t *ws, uint64_t *slow,
                           uint64_t *alnum, int at)
{
    __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8(' ')),
                                          _mm_cmpeq_epi8(v, _mm_set1_epi8('\t'))),
                             _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')),
                                          _mm_cmpeq_epi8(v, _mm_set1_epi8('\r'))));
    /* Signed bytes: below 0x20 is a control or a non-ASCII byte (>= 0x80 is negative). */
    __m128i ctl = _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                               _mm_cmpeq_epi8(v, _mm_set1_epi8(0x7F)));
    __m128i trig = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('%')),
                                             _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                _mm_cmpeq_epi8(v, _mm_set1_epi8('&')));
    __m128i sl = _mm_or_si128(_mm_andnot_si128(w, ctl), _mm_and_si128(trig, trig_on));
    /* Unsigned range checks as signed compares after moving the range to start at -128. */
    __m128i digit = _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8((char)(0x80 - '0'))),
                                   _mm_set1_epi8((char)(-128 + 10)));
    __m128i letter = _mm_cmplt_epi8(
        _mm_add_epi8(_mm_or_si128(v, _mm_set1_epi8(0x20)), _mm_set1_epi8((char)(0x80 - 'a'))),
        _mm_set1_epi8((char)(-128 + 26)));
    *ws |= (uint64_t)(uint16_t)_mm_movemask_epi8(w) << at;
    *slow |= (uint64_t)(uint16_t)_mm_movemask_epi8(sl) << at;
    *alnum |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_or_si128(digit, letter)) << at;
}
#endif

static inline void block_masks_of(const uint8_t *p, int escapes, block_masks *m)
{
    m->ws = m->slow = m->alnum = 0;
#ifdef QG_SCAN_SSE2
    __m128i trig_on = _mm_set1_epi8(escapes ? -1 : 0);
    for (int at = 0; at < 64; at += 16)
        masks16(_mm_loadu_si128((const __m128i *)(p + at)), trig_on, &m->ws, &m->slow, &m->alnum,
                at);
#else
    unsigned trig = escapes ? FAST_TRIG : 0;
    for (int at = 0; at < 64; at++) {
        unsigned c = fast_class(p[at]);
        m->ws |= (uint64_t)(c == FAST_WS) << at;
        m->slow |= (uint64_t)((c & (FAST_SLOW | trig)) != 0) << at;
        m->alnum |= (uint64_t)(c == FAST_ALNUM) << at;
    }
#endif
}

#ifdef QG_SCAN_DISPATCH

/* block_masks_of in 32-byte vectors, for the AVX2 variant of the pass (the same bits). The
 * constants are loaded from memory, from an array that is not const: as constants (written with
 * _mm256_set1_epi8 or read from a const array), GCC rebuilt every one of them in every block
 * (mov, vmovd, vpbroadcastb), which cost more than the classification itself. */
static uint8_t avx2_consts[10][32] __attribute__((aligned(32))) = {
#define R32(x) {x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}
#define LUT(b0, b5, b6, b9, b10, b12, b13)                                                         \
    {b0, 0, 0, 0, 0, b5, b6, 0, 0, b9, b10, 0, b12, b13, 0, 0,                                   \
     b0, 0, 0, 0, 0, b5, b6, 0, 0, b9, b10, 0, b12, b13, 0, 0}
    /* Indexed by the low nibble (vpshufb gives 0 for a byte >= 0x80): the one byte of the set
     * with that low nibble, or 0 (the byte equals it only if it is in the set, or is NUL for
     * the trigger table, and NUL takes the general path anyway). */
    LUT(' ', 0, 0, '\t', '\n', 0, '\r'), /* 0: whitespace that is never flagged */
    LUT(0, '%', '&', 0, 0, '\\', 0),      /* 1: escape triggers */
    R32(0),                                /* 2: escape triggers when escapes are off: none */
    R32(0x21),                             /* 3: b + 1 < 0x21 (signed): controls, DEL, non-ASCII */
    R32(1),
    R32(0x80 - '0'), /* 5: digits to -128.. */
    R32(0x20),       /* 6: lower case */
    R32(0x80 - 'a'), /* 7: letters to -128.. */
    R32(0x80 + 10),  /* 8: -128 + 10 */
    R32(0x80 + 26),  /* 9: -128 + 26 */
#undef LUT
#undef R32
};

__attribute__((target("avx2"))) static inline __m256i avx2_const(const uint8_t *c)
{
    return _mm256_load_si256((const __m256i *)c);
}

__attribute__((target("avx2"))) static inline void block_masks_avx2(const uint8_t *p, int escapes,
                                                                    block_masks *m)
{
    const uint8_t *trig_tbl = avx2_consts[escapes ? 1 : 2];
    uint32_t ws[2], slow[2], alnum[2];
    for (int half = 0; half < 2; half++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + 32 * half));
        __m256i w = _mm256_cmpeq_epi8(v, _mm256_shuffle_epi8(avx2_const(avx2_consts[0]), v));
        __m256i trig = _mm256_cmpeq_epi8(v, _mm256_shuffle_epi8(avx2_const(trig_tbl), v));
        __m256i ctl = _mm256_cmpgt_epi8(avx2_const(avx2_consts[3]),
                                        _mm256_add_epi8(v, avx2_const(avx2_consts[4])));
        __m256i sl = _mm256_or_si256(_mm256_andnot_si256(w, ctl), trig);
        __m256i digit = _mm256_cmpgt_epi8(avx2_const(avx2_consts[8]),
                                          _mm256_add_epi8(v, avx2_const(avx2_consts[5])));
        __m256i letter = _mm256_cmpgt_epi8(
            avx2_const(avx2_consts[9]),
            _mm256_add_epi8(_mm256_or_si256(v, avx2_const(avx2_consts[6])), avx2_const(avx2_consts[7])));
        ws[half] = (uint32_t)_mm256_movemask_epi8(w);
        slow[half] = (uint32_t)_mm256_movemask_epi8(sl);
        alnum[half] = (uint32_t)_mm256_movemask_epi8(_mm256_or_si256(digit, letter));
    }
    m->ws = ws[0] | (uint64_t)ws[1] << 32;
    m->slow = slow[0] | (uint64_t)slow[1] << 32;
    m->alnum = alnum[0] | (uint64_t)alnum[1] << 32;
}
#endif

/* Bits a .. a+len-1 (len <= 64). */
static inline uint64_t bit_range(unsigned a, unsigned len)
{
    return (len >= 64 ? ~0ull : ((1ull << len) - 1)) << a;
}

/* ---------------------------------------------------------------------------------------------
 * The block loop for plain ASCII: token_body's work for the tokens of blocks where none of its
 * rare cases can come up. Every token has 16 readable bytes (i + 80 <= n, or a padded copy of
 * the last bytes), the table has room for every token of the block (so it cannot grow), the
 * model-token cap cannot be crossed (a block adds at most 64) and the n-gram arrays have
 * NG_SLACK room. Then the state stays in registers and a token costs about half of what it does
 * in token_body. A token of fast_len bytes or more (a long token or a possible blob) still goes
 * through token_body, out of line. */

/* scan_blobs out of line, for the block loop's tokens of blob_scan bytes up to out_len. */
static __attribute__((noinline)) void scan_blobs_out(scanner *st, size_t a, size_t b, int64_t position)
{
    scan_blobs(st, a, b, position);
}

/* token_body out of line, for the rare tokens that leave the block loop. */
static __attribute__((noinline)) void token_out_generic(scanner *st, hot_state *h, size_t a, size_t b,
                                                        int64_t position, int64_t letters,
                                                        int64_t other_ascii)
{
    token_body(st, h, a, b, position, letters, other_ascii, 0, 0);
}

#ifdef QG_SCAN_DISPATCH
__attribute__((target("avx2,popcnt,bmi,bmi2,aes"), noinline)) static void
token_out_hw(scanner *st, hot_state *h, size_t a, size_t b, int64_t position, int64_t letters,
             int64_t other_ascii)
{
    token_body(st, h, a, b, position, letters, other_ascii, 0, 1);
}

__attribute__((target("bmi"))) static inline size_t tzcnt64(uint64_t x)
{
    return (size_t)_tzcnt_u64(x);
}

__attribute__((target("bmi2"))) static inline unsigned alnum_in(uint64_t alnum, size_t a, size_t e)
{
    return (unsigned)__builtin_popcountll(_bzhi_u64(alnum, (unsigned)e + 1) >> a);
}

/* The token's first len <= 16 bytes, zero-padded, and their aes_token_hash (one table row per
 * length: the mask and the second round key with the length in it). */
__attribute__((target("avx2,aes"))) static inline __m128i fast_key(const uint8_t *t, const uint8_t *row)
{
    return _mm_and_si128(_mm_loadu_si128((const __m128i *)t), _mm_load_si128((const __m128i *)row));
}

__attribute__((target("avx2,aes"))) static inline uint64_t fast_aes_hash(__m128i v, const uint8_t *row,
                                                                        __m128i k0, __m128i k1)
{
    __m128i x = _mm_aesenc_si128(_mm_xor_si128(v, k0), _mm_load_si128((const __m128i *)(row + 16)));
    x = _mm_aesenc_si128(x, k0);
    x = _mm_aesenc_si128(x, k1);
    return (uint64_t)_mm_cvtsi128_si64(x);
}

__attribute__((target("avx2"))) static inline int same_bytes(const token_entry *en, __m128i v)
{
    __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)&en->head), v);
    return _mm_testz_si128(x, x);
}

__attribute__((target("avx2"))) static inline int same_key(const uint8_t *key, __m128i v)
{
    __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)key), v);
    return _mm_testz_si128(x, x);
}
#endif

/* Whether x has a run of at least k set bits, for 8 <= k <= 17 (the range of fast_len: blob
 * thresholds are at least 8, and tokens from 17 bytes always leave the block loop); any other k
 * answers "maybe" (x != 0). A block without such a run has no token that leaves the fast path,
 * and its loop skips the per-token length test: with one compare and branch fewer, and one value
 * fewer to keep, the loop keeps its state in registers (about 5% of the 500-token scan). */
static inline int has_run(uint64_t x, size_t k)
{
    if (k < 8 || k > 17)
        return x != 0;
    uint64_t r = x & (x >> 1);
    r &= r >> 2;
    r &= r >> 4; /* bit j: bits j .. j+7 of x are set */
    r &= r >> (k - 8 < 8 ? k - 8 : 8);
    r &= x >> (k - 1);
    return r != 0;
}

/* What the block loop keeps in locals: loop invariants, and (model, ng) the state it updates. */
typedef struct {
    const uint8_t *s;
    uint16_t *small;
    uint32_t *slots;
    token_entry *entries;
    size_t mask, fast_len, out_len;
#ifdef QG_SCAN_DISPATCH
    __m128i k0, k1;
#endif
} fast_env;

static inline __attribute__((always_inline)) fast_env fast_env_of(const scanner *st, const hot_state *h)
{
    fast_env env;
    env.s = st->s;
    env.small = h->small;
    env.slots = h->slots;
    env.entries = h->entries;
    env.mask = h->mask;
    env.fast_len = h->fast_len;
    env.out_len = h->out_len;
#ifdef QG_SCAN_DISPATCH
    env.k0 = _mm_set_epi64x((long long)h->key[1], (long long)h->key[0]);
    env.k1 = _mm_set_epi64x((long long)h->key[3], (long long)h->key[2]);
#endif
    return env;
}

/* The tokens that start and end inside the block at s[i]: s[i + a .. i + e] for the paired bits
 * of starts and ends (the lowest start goes with the lowest end; a start left over is returned).
 * tok: the block's token bytes. pos0: the position of s[i]. all_alnum: every token byte of the
 * block is a letter or digit, so a token's letters are its length. */
static inline __attribute__((always_inline)) uint64_t
fast_tokens_loop(scanner *st, hot_state *h, const fast_env *env, int64_t *model_io,
                 unsigned *ng_io, const uint8_t *p, uint64_t tok, uint64_t starts, uint64_t ends,
                 uint64_t alnum, size_t i, int64_t pos0, int all_alnum, int may_be_long, int small,
                 int hw)
{
    size_t ng = *ng_io;
    size_t first = (size_t)__builtin_ctzll(starts), last = 63 - (size_t)__builtin_clzll(ends);
    uint64_t range = (2ull << last) - (1ull << first);
    int64_t model;
    /* Tokens of letters and digits only, each shorter than fast_len <= 17 bytes, add ceil(len / 4)
     * each: the number of their bytes 0, 4, 8 and 12 bytes from their start, counted for the
     * whole block here (q: the byte and the three before it are token bytes, so a token byte four
     * after one of the set is in the same token) instead of per token in the loop below, where
     * the sum was one more memory operand in every token. */
    const int whole = all_alnum && !may_be_long;
    if (whole) {
        uint64_t q = tok & (tok << 1) & (tok << 2) & (tok << 3);
        uint64_t s0 = starts & range, s4 = (s0 << 4) & q, s8 = (s4 << 4) & q, s12 = (s8 << 4) & q;
        model = *model_io + popcount64(s0 | s4 | s8 | s12, hw);
    } else {
        /* The tokens' bytes now; per token below, what ceil(letters / 4) leaves of its letters. */
        model = *model_io + popcount64(tok & range, hw);
    }
    do {
        size_t a, e;
#ifdef QG_SCAN_DISPATCH
        if (hw) {
            a = tzcnt64(starts);
            e = tzcnt64(ends);
        } else
#endif
        {
            a = (size_t)__builtin_ctzll(starts);
            e = (size_t)__builtin_ctzll(ends);
        }
        starts &= starts - 1;
        ends &= ends - 1;
        size_t len = e + 1 - a;
        unsigned al;
        if (all_alnum)
            al = (unsigned)len;
        else
#ifdef QG_SCAN_DISPATCH
        if (hw)
            al = alnum_in(alnum, a, e);
        else
#endif
            al = popcount64(alnum & ((2ull << e) - (1ull << a)), 0);
        if (may_be_long && __builtin_expect(len >= env->fast_len, 0)) {
            if (len < env->out_len) {
                /* Long enough to decode as a blob, short enough to hash here; shorter than
                 * min_blob_len (out_len), and p + a has 16 readable bytes, so a plain word is
                 * passed over here, without the call. */
                if (!word_token16(p + a, len, 16))
                    scan_blobs_out(st, i + a, i + a + len, pos0 + (int64_t)a);
            } else {
                h->ng_n = (unsigned)ng;
                h->model = model - (int64_t)len;
#ifdef QG_SCAN_DISPATCH
                if (hw)
                    token_out_hw(st, h, i + a, i + a + len, pos0 + (int64_t)a, al,
                                 (int64_t)(len - al));
                else
#endif
                    token_out_generic(st, h, i + a, i + a + len, pos0 + (int64_t)a, al,
                                      (int64_t)(len - al));
                ng = h->ng_n;
                model = h->model;
                continue;
            }
        }
        /* len - al + ceil(al / 4) in all, as token_body adds it; len was added above. */
        if (!whole)
            model -= (int64_t)((3 * al) >> 2);
        const uint8_t *t = p + a;
        uint64_t hash, head = 0, next = 0;
#ifdef QG_SCAN_DISPATCH
        __m128i v = _mm_setzero_si128();
        if (hw) {
            const uint8_t *row = st->aes_len[len][0];
            v = fast_key(t, row);
            hash = fast_aes_hash(v, row, env->k0, env->k1);
        } else
#endif
        {
            head16 w = head_next16(t, len);
            head = w.head;
            next = w.next;
            hash = token_hash16(h->key, head, next, len); /* len <= 16: token_hash without a tail */
        }
        size_t slot = (size_t)hash & env->mask, id;
        for (;;) {
            id = small ? env->small[slot] : env->slots[slot];
            if (__builtin_expect(id == 0, 0)) {
                token_entry *en = small ? &st->stack_entries[h->unique] : &env->entries[h->unique];
#ifdef QG_SCAN_DISPATCH
                if (hw)
                    _mm_storeu_si128((__m128i *)&en->head, v);
                else
#endif
                {
                    en->head = head;
                    en->next = next;
                }
                en->len = (uint32_t)len;
                en->offset = (uint32_t)(i + a);
                id = (size_t)++h->unique;
                if (small) {
                    env->small[slot] = (uint16_t)id;
#ifdef QG_SCAN_DISPATCH
                    if (hw)
                        _mm_storeu_si128((__m128i *)slot_key(env->small, slot), v);
                    else
#endif
                    {
                        memcpy(slot_key(env->small, slot), &head, 8);
                        memcpy(slot_key(env->small, slot) + 8, &next, 8);
                    }
                    st->stack_used[id - 1] = (uint16_t)slot;
                } else
                    env->slots[slot] = (uint32_t)id;
                break;
            }
            if (small) {
                /* Every token here is short: a set slot with its key is the token (see
                 * token_entry), with no load of the entry behind the slot. */
#ifdef QG_SCAN_DISPATCH
                if (hw) {
                    if (same_key(slot_key(env->small, slot), v))
                        break;
                } else
#endif
                {
                    uint64_t k[2];
                    memcpy(k, slot_key(env->small, slot), 16);
                    if (((k[0] ^ head) | (k[1] ^ next)) == 0)
                        break;
                }
            } else {
                const token_entry *en = &env->entries[id - 1];
#ifdef QG_SCAN_DISPATCH
                if (hw) {
                    if (same_bytes(en, v) && en->len == (uint32_t)len)
                        break;
                } else
#endif
                    if (((en->len ^ len) | (en->head ^ head) | (en->next ^ next)) == 0)
                        break;
            }
            slot = (slot + 1) & env->mask;
            h->probes++;
        }
        st->ng_ids[ng] = (uint32_t)id;
        st->ng_pos[ng] = (uint32_t)(pos0 + (int64_t)a);
        ng++;
    } while (ends);
    if (ng >= NG_KEEP + NG_CHUNK) {
        h->ng_n = (unsigned)ng;
        ng_flush(st, h, hw);
        ng = h->ng_n;
    }
    *ng_io = (unsigned)ng;
    *model_io = model;
    return starts;
}

/* fast_tokens_loop; a block whose tokens are all letters and digits (common in plain queries)
 * skips counting each token's letters: about 4% of the benchmark query's scan, and the same time
 * as before on English with punctuation. */
static inline __attribute__((always_inline)) uint64_t
fast_tokens(scanner *st, hot_state *h, const fast_env *env, int64_t *model_io, unsigned *ng_io,
            const uint8_t *p, uint64_t tok, uint64_t starts, uint64_t ends, uint64_t alnum,
            size_t i, int64_t pos0, int small, int hw)
{
    /* The token bytes up to the last end: every token handled here lies in them. */
    uint64_t done = tok & ((2ull << (63 - __builtin_clzll(ends))) - 1);
    if (has_run(done, env->fast_len))
        return fast_tokens_loop(st, h, env, model_io, ng_io, p, tok, starts, ends, alnum, i, pos0,
                                (tok & ~alnum) == 0, 1, small, hw);
    if ((tok & ~alnum) == 0)
        return fast_tokens_loop(st, h, env, model_io, ng_io, p, tok, starts, ends, alnum, i, pos0,
                                1, 0, small, hw);
    return fast_tokens_loop(st, h, env, model_io, ng_io, p, tok, starts, ends, alnum, i, pos0, 0,
                            0, small, hw);
}

/* Whether the block loop may take the block at s[i] of the text itself (see above). */
static inline int fast_ok(const scanner *st, const hot_state *h, size_t i)
{
    return st->n - i >= 80 && (size_t)h->unique + 32 <= h->room && h->model <= h->model_cap - 64;
}

/* One block for the pass (its first after the general path): fast_tokens with its state. */
static inline __attribute__((always_inline)) uint64_t
fast_block(scanner *st, hot_state *h, uint64_t tok, uint64_t starts, uint64_t ends, uint64_t alnum,
           size_t i, int64_t pos0, int small, int hw)
{
    fast_env env = fast_env_of(st, h);
    int64_t model = h->model;
    unsigned ng = h->ng_n;
    starts = fast_tokens(st, h, &env, &model, &ng, st->s + i, tok, starts, ends, alnum, i, pos0,
                         small, hw);
    h->model = model;
    h->ng_n = ng;
    return starts;
}

/* Blocks of plain ASCII from s[i], with no token open at i, for as long as fast_ok holds: the
 * pass's block step for them, without the pass's general state. Returns where it stopped; if
 * *fresh is set, m holds the masks of the block there (one the pass has to take). */
static inline __attribute__((always_inline)) size_t
fast_run(scanner *st, hot_state *h, size_t i, int64_t shift, block_masks *m, int *fresh, int small,
         int hw)
{
    const int escapes = st->rules->encoded_payloads;
    const size_t n = st->n, room = h->room;
    const int64_t model_max = h->model_cap - 64;
    fast_env env = fast_env_of(st, h);
    int64_t model = h->model;
    unsigned ng = h->ng_n;
    /* The last bytes (fewer than 80 from tail_at) are read from a copy padded with spaces, which
     * gives every token 16 readable bytes and ends the last token where the text does (as the
     * pass's padded tail block does). */
    uint8_t tail[80 + 64 + 16];
    size_t tail_at = SIZE_MAX;
    *fresh = 0;
    while (i < n && (size_t)h->unique + 32 <= room && model <= model_max) {
        const uint8_t *p = env.s + i;
        if (__builtin_expect(n - i < 80, 0)) {
            if (tail_at == SIZE_MAX) {
                tail_at = i;
                memcpy(tail, env.s + i, n - i);
                memset(tail + (n - i), ' ', sizeof tail - (n - i));
            }
            p = tail + (i - tail_at);
        }
        block_masks bm;
#ifdef QG_SCAN_DISPATCH
        if (hw)
            block_masks_avx2(p, escapes, &bm);
        else
#endif
            block_masks_of(p, escapes, &bm);
        if (bm.slow) {
            *m = bm;
            *fresh = 1;
            break;
        }
        uint64_t tok = ~bm.ws;
        uint64_t starts = tok & ~(tok << 1);
        uint64_t ends = tok & ~(tok >> 1) & (~0ull >> 1); /* an end at bit 63 is not known yet */
        if (ends)
            starts = fast_tokens(st, h, &env, &model, &ng, p, tok, starts, ends, bm.alnum, i,
                                 (int64_t)i - shift, small, hw);
        size_t a;
#ifdef QG_SCAN_DISPATCH
        if (hw) {
            /* tzcnt gives 64 without a start: no branch on whether a token is open at the end of
             * the block, which about one block in seven is not, at random. */
            a = tzcnt64(starts);
        } else
#endif
        {
            if (!starts) {
                i += 64;
                continue;
            }
            a = (size_t)__builtin_ctzll(starts);
        }
        if (a == 0) {
            /* A token of 64 bytes or more: the pass carries it. */
            *m = bm;
            *fresh = 1;
            break;
        }
        /* The next block starts at the open token, so that it ends inside a block. */
        i += a;
    }
    h->model = model;
    h->ng_n = ng;
    return i < n ? i : n;
}

#define FAST_ARGS scanner *st, hot_state *h, uint64_t tok, uint64_t starts, uint64_t ends, \
                  uint64_t alnum, size_t i, int64_t pos0
#define RUN_ARGS scanner *st, hot_state *h, size_t i, int64_t shift, block_masks *m, int *fresh
/* Compiled apart from the pass, one per table kind and variant: inlined into the pass, whose
 * other state competes for the registers, the token loop spilled half of its variables. */
static __attribute__((noinline)) uint64_t fast_small_generic(FAST_ARGS)
{
    return fast_block(st, h, tok, starts, ends, alnum, i, pos0, 1, 0);
}
static __attribute__((noinline)) uint64_t fast_heap_generic(FAST_ARGS)
{
    return fast_block(st, h, tok, starts, ends, alnum, i, pos0, 0, 0);
}
static __attribute__((noinline)) size_t run_small_generic(RUN_ARGS)
{
    return fast_run(st, h, i, shift, m, fresh, 1, 0);
}
static __attribute__((noinline)) size_t run_heap_generic(RUN_ARGS)
{
    return fast_run(st, h, i, shift, m, fresh, 0, 0);
}
#ifdef QG_SCAN_DISPATCH
__attribute__((target("avx2,popcnt,bmi,bmi2,aes"), noinline)) static uint64_t fast_small_hw(FAST_ARGS)
{
    return fast_block(st, h, tok, starts, ends, alnum, i, pos0, 1, 1);
}
__attribute__((target("avx2,popcnt,bmi,bmi2,aes"), noinline)) static uint64_t fast_heap_hw(FAST_ARGS)
{
    return fast_block(st, h, tok, starts, ends, alnum, i, pos0, 0, 1);
}
__attribute__((target("avx2,popcnt,bmi,bmi2,aes"), noinline)) static size_t run_small_hw(RUN_ARGS)
{
    return fast_run(st, h, i, shift, m, fresh, 1, 1);
}
__attribute__((target("avx2,popcnt,bmi,bmi2,aes"), noinline)) static size_t run_heap_hw(RUN_ARGS)
{
    return fast_run(st, h, i, shift, m, fresh, 0, 1);
}
#endif
#undef FAST_ARGS
#undef RUN_ARGS

/* The pass, inlined twice: hw = 1 is compiled for CPUs with AVX2/POPCNT/BMI/AES-NI
 * (runtime-dispatched, the build targets baseline x86-64); both compute exactly the same figures. */
static inline __attribute__((always_inline)) int
scan_pass(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out,
          qg_scan_table *shared, int hw)
{
    out->first_repeat = out->token_cap_at = out->model_cap_at = -1;

    /* Field by field, not a memset: GCC makes a memset of this size a rep stos, slow to start. */
    scanner st;
    st.s = s;
    st.n = n;
    st.rules = rules;
    st.cls = ascii_class();
    st.out = out;
    st.nomem = 0;
    st.run_kind = -1;
    st.run_mark = st.run_end = 0;
    st.chain_end = st.selector_end = SIZE_MAX; /* no chain ends before the first byte */
    st.tags_ok_end = st.escape_end = 0;
    st.slots = NULL;
    st.best_tok = 0;
    st.ng_active = 0;
    for (int g = 0; g <= MAX_NGRAM; g++)
        st.ng_prev[g] = 0;

    /* At most n/2 + 1 distinct tokens, but real text has far fewer: start with the small table
     * and double on the heap when full. Its index is the caller's, kept zeroed between scans (the
     * binding's, while it holds the GIL): zeroing 8 KB on every call, started with a slow rep stos,
     * cost a 500-token query more than its n-gram bookkeeping, and a thread-local index instead
     * cost a call to __tls_get_addr that misses the cache after the interpreter ran. Else one on
     * the stack, sized down for short inputs so there is little to zero. */
    small_table stack_table __attribute__((aligned(64)));
    qg_scan_table *heap_table = NULL;
    size_t slots = STACK_SLOTS;
    uint16_t *index;
    if (shared)
        index = shared->slots;
    else {
        slots = 64;
        while (slots < STACK_SLOTS && slots / STACK_LOAD < n / 2 + 1)
            slots *= 2;
        index = stack_table.slots;
        if (slots > STACK_KEYS) {
            heap_table = (qg_scan_table *)malloc(sizeof *heap_table);
            if (!heap_table)
                return QG_SCAN_NOMEM;
            index = heap_table->slots;
        }
        /* Only the slots: keys need no zeroing (see token_entry). */
        memset(index, 0, slots * sizeof index[0]);
    }
    st.small = index;
    st.entries = st.stack_entries;
    st.mask = slots - 1;
    st.room = slots / STACK_LOAD;

    hot_state hot;
    hot.small = st.small;
    hot.slots = NULL;
    hot.entries = st.entries;
    hot.mask = st.mask;
    hot.room = st.room;
    hot.unique = hot.model = hot.probes = hot.ng_base = 0;
    hot.ng_n = NG_KEEP;
    st.ng_next_id = 1;
    hash_key(st.key);
    memcpy(hot.key, st.key, sizeof hot.key);
#ifdef QG_SCAN_DISPATCH
    if (hw)
        for (unsigned len = 0; len <= 16; len++) {
            uint64_t kl[2] = {st.key[2] ^ len, st.key[3]};
            memcpy(st.aes_len[len][0], aes_masks[len], 16);
            memcpy(st.aes_len[len][1], kl, 16);
        }
#endif
    for (unsigned j = 0; j < NG_KEEP; j++)
        st.ng_ids[j] = UINT32_MAX - j; /* before the first token: equal to nothing */
    hot.model_cap = rules->max_model_tokens >= 0 ? rules->max_model_tokens : INT64_MAX;
    hot.blob_min = rules->encoded_payloads && rules->min_blob_len >= 0 ? (size_t)rules->min_blob_len
                                                                          : SIZE_MAX;
    hot.blob_scan = hot.blob_min < DECODE_MIN ? hot.blob_min : hot.blob_min == SIZE_MAX ? SIZE_MAX : DECODE_MIN;
    hot.out_len = hot.blob_min < 17 ? hot.blob_min : 17;
    hot.fast_len = hot.blob_scan < hot.out_len ? hot.blob_scan : hot.out_len;

    const uint8_t *cls = st.cls;
    const int str_input = rules->str_input, escapes = rules->encoded_payloads;
    size_t i = 0, tok_start = 0;
    int in_token = 0;
    int64_t shift = 0; /* byte offset minus code-point index (str input only) */
    int64_t tok_pos = 0, letters = 0, other_ascii = 0, non_ascii = 0;

#define START_TOKEN()                                                                              \
    do {                                                                                           \
        if (!in_token) {                                                                           \
            in_token = 1;                                                                          \
            tok_start = i;                                                                         \
            tok_pos = (int64_t)i - shift;                                                          \
            letters = other_ascii = non_ascii = 0;                                                 \
        }                                                                                          \
    } while (0)
#define END_TOKEN()                                                                                \
    do {                                                                                           \
        if (in_token) {                                                                            \
            token_body(&st, &hot, tok_start, i, tok_pos, letters, other_ascii, non_ascii, hw);     \
            in_token = 0;                                                                          \
        }                                                                                          \
    } while (0)

    int clean = 1; /* the last block had no byte for the general path */
    while (i < n) {
        /* ---- blocks ---- */
        block_masks m;
        int fresh = 0;
        if (clean && !in_token && (size_t)hot.unique + 32 <= hot.room &&
            hot.model <= hot.model_cap - 64) {
#ifdef QG_SCAN_DISPATCH
            if (hw)
                i = hot.small ? run_small_hw(&st, &hot, i, shift, &m, &fresh)
                              : run_heap_hw(&st, &hot, i, shift, &m, &fresh);
            else
#endif
                i = hot.small ? run_small_generic(&st, &hot, i, shift, &m, &fresh)
                              : run_heap_generic(&st, &hot, i, shift, &m, &fresh);
        }
        if (i >= n)
            break;
        size_t avail = n - i;
        if (fresh) {
            /* fast_run stopped at a block it classified */
        } else if (avail >= 64) {
#ifdef QG_SCAN_DISPATCH
            if (hw)
                block_masks_avx2(s + i, escapes, &m);
            else
#endif
                block_masks_of(s + i, escapes, &m);
        } else {
            /* The tail, padded with spaces: the padding ends a token exactly where the text does. */
            uint8_t tail[64];
            memcpy(tail, s + i, avail);
            memset(tail + avail, ' ', 64 - avail);
            block_masks_of(tail, escapes, &m);
        }
        unsigned limit = m.slow ? (unsigned)__builtin_ctzll(m.slow) : 64;
        if (limit > avail)
            limit = (unsigned)avail;
        clean = limit == 64;
        /* Token bytes, the first byte of each run and the last byte of each run that is known to
         * end inside the block (a run reaching the limit stays open). Walking starts and ends as
         * two independent bit sets keeps the per-token dependency chain short. */
        uint64_t tok = ~m.ws & bit_range(0, limit);
        uint64_t starts = tok & ~(tok << 1);
        uint64_t ends = limit ? tok & ~(tok >> 1) & bit_range(0, limit - 1) : 0;
        if (in_token) {
            if (tok & 1) {
                starts &= ~1ull;
                unsigned last = ends ? (unsigned)__builtin_ctzll(ends) : limit - 1;
                uint64_t bits = bit_range(0, last + 1);
                unsigned al = popcount64(m.alnum & bits, hw);
                letters += al;
                other_ascii += last + 1 - al;
                if (ends) {
                    ends &= ends - 1;
                    token_body(&st, &hot, tok_start, i + last + 1, tok_pos, letters, other_ascii,
                               non_ascii, hw);
                    in_token = 0;
                }
            } else if (limit) {
                token_body(&st, &hot, tok_start, i, tok_pos, letters, other_ascii, non_ascii, hw);
                in_token = 0;
            }
        }
        /* Each end closes the start before it; a start left over opens a token that reaches the
         * limit. */
        if (ends && fast_ok(&st, &hot, i)) {
            int64_t pos0 = (int64_t)i - shift;
#ifdef QG_SCAN_DISPATCH
            if (hw)
                starts = hot.small ? fast_small_hw(&st, &hot, tok, starts, ends, m.alnum, i, pos0)
                                   : fast_heap_hw(&st, &hot, tok, starts, ends, m.alnum, i, pos0);
            else
#endif
                starts = hot.small ? fast_small_generic(&st, &hot, tok, starts, ends, m.alnum, i, pos0)
                                   : fast_heap_generic(&st, &hot, tok, starts, ends, m.alnum, i, pos0);
            ends = 0;
        }
        while (ends) {
            unsigned a = (unsigned)__builtin_ctzll(starts);
            unsigned e = (unsigned)__builtin_ctzll(ends);
            starts &= starts - 1;
            ends &= ends - 1;
            unsigned al = popcount64(m.alnum & ((2ull << e) - (1ull << a)), hw);
            token_body(&st, &hot, i + a, i + e + 1, (int64_t)(i + a) - shift, al, e + 1 - a - al, 0,
                       hw);
        }
        if (starts) {
            unsigned a = (unsigned)__builtin_ctzll(starts);
            if (limit == 64 && a > 0) {
                /* The next block starts at this token, so that it ends inside a block and goes
                 * through the block loop: a token carried over from one block to the next costs
                 * the general token_body, about twice a re-read of its bytes. */
                i += a;
                continue;
            }
            unsigned al = popcount64(m.alnum & bit_range(a, limit - a), hw);
            in_token = 1;
            tok_start = i + a;
            tok_pos = (int64_t)(i + a) - shift;
            letters = al;
            other_ascii = limit - a - al;
            non_ascii = 0;
        }
        i += limit;
        if (limit == 64 || i >= n)
            continue;

        /* ---- the general path, from a byte the blocks do not handle ---- */
        /* It hands back at the next ASCII byte: classifying a block costs a few plain bytes' worth
         * of work, while the general path costs about that per byte. */
        do {
            uint8_t b = s[i];
            unsigned c = cls[b];
            if (c & C_PLAIN) {
                START_TOKEN();
                size_t j = i;
                int64_t alnum = 0;
                do {
                    alnum += c & C_ALNUM;
                    j++;
                } while (j < n && ((c = cls[s[j]]) & C_PLAIN));
                letters += alnum;
                other_ascii += (int64_t)(j - i) - alnum;
                i = j;
                continue;
            }
            int64_t position = (int64_t)i - shift;
            if (b < 0x80) {
                if (c & C_WS) {
                    END_TOKEN();
                } else {
                    START_TOKEN();
                    other_ascii++;
                    if ((c & C_TRIG) && escapes && i >= st.escape_end)
                        scan_escape(&st, i, position);
                }
                if (c & C_CTRL)
                    flag(&st, QG_K_CONTROL, i, 1, position, b);
                i++;
                continue;
            }
            uint32_t cp;
            int len = decode(s, n, i, str_input, &cp);
            if (len == 0) {
                START_TOKEN();
                non_ascii++;
                flag(&st, QG_K_INVALID_UTF8, i, 1, position, b);
                i++;
                continue;
            }
            if (is_unicode_space(cp)) {
                END_TOKEN();
                if (cp == 0x85)
                    flag(&st, QG_K_CONTROL, i, (size_t)len, position, cp);
            } else {
                START_TOKEN();
                non_ascii++;
                classify(&st, cp, i, len, position);
            }
            if (str_input)
                shift += len - 1;
            i += (size_t)len;
        } while (i < n && s[i] >= 0x80);
    }
    END_TOKEN();
#undef START_TOKEN
#undef END_TOKEN

    int64_t tokens = hot.ng_base + hot.ng_n - NG_KEEP;
    out->token_count = tokens;
    out->probes = hot.probes;
    out->unique_tokens = hot.unique;
    out->model_tokens = hot.model;
    if (hot.ng_n > NG_KEEP)
        ngram_chunk(&st, hot.ng_n - NG_KEEP, hot.ng_base, hot.unique, hw);
    for (unsigned act = st.ng_active; act; act &= act - 1)
        end_streak(&st, __builtin_ctz(act) + 1, tokens);
    /* Leave the caller's index zeroed: the stack entries are the tokens that were put in it (all
     * STACK_ENTRIES of them if the table moved to the heap). Their keys too, though a key is
     * never read without its slot: the shared index lives as long as the process, and the keys
     * are the query's own words (an SSN is 11 bytes). */
    if (shared)
        for (size_t k = 0, used = hot.unique < STACK_ENTRIES ? (size_t)hot.unique : STACK_ENTRIES;
             k < used; k++) {
            shared->slots[st.stack_used[k]] = 0;
            memset(shared->keys[st.stack_used[k]], 0, 16);
        }
    free(heap_table);
    free(st.slots);
    if (!st.small)
        free(st.entries);
    if (st.nomem) {
        qg_scan_out_free(out);
        return QG_SCAN_NOMEM;
    }
    return QG_SCAN_OK;
}

static int scan_generic(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out,
                        qg_scan_table *index)
{
    return scan_pass(s, n, rules, out, index, 0);
}

#ifdef QG_SCAN_DISPATCH
__attribute__((target("avx2,popcnt,bmi,bmi2,aes"))) static int
scan_bmi(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out, qg_scan_table *index)
{
    return scan_pass(s, n, rules, out, index, 1);
}
#endif

int qg_scan(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out)
{
    return qg_scan_index(s, n, rules, out, NULL);
}

int qg_scan_index(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out,
                  qg_scan_table *index)
{
    if (n > QG_SCAN_MAX_BYTES)
        return QG_SCAN_TOO_BIG;
#ifdef QG_SCAN_DISPATCH
    /* 1: generic, 2: AVX2+POPCNT+BMI1+BMI2+AES-NI. Racing first calls store the same value.
     * QG_SCAN_GENERIC (any value) forces the generic pass, for testing it on such CPUs. */
    static volatile int variant = 0;
    if (!variant) {
        __builtin_cpu_init();
        variant = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") &&
                          __builtin_cpu_supports("bmi") &&
                          __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("aes") &&
                          !getenv("QG_SCAN_GENERIC")
                      ? 2
                      : 1;
    }
    if (variant == 2)
        return scan_bmi(s, n, rules, out, index);
#endif
    return scan_generic(s, n, rules, out, index);
}

void qg_scan_out_free(qg_scan_out *out)
{
    free(out->marks);
    out->marks = NULL;
    out->n_marks = out->cap_marks = 0;
}

/* ---------------------------------------------------------------------------------------------
 * Glued repetition (_scan_py.glued_runs): a pass of its own, run only when the rule is on, so the
 * scan above is the same code and the same cost with it off. A run's units are its code points
 * (invalid bytes as 0xDC00 + byte, as Python's surrogateescape has them), not its bytes: scripts
 * whose UTF-8 shares lead bytes (Thai is E0 B8/B9 xx throughout) would otherwise match at every
 * multiple of 3 bytes. The units are compared in the narrowest width that holds them all. */

/* count of k < len with a[k] == b[k] for elements of 1, 2 or 4 bytes: vectors of 16 bytes (SSE2)
 * or 32 (AVX2), whose lanes count matches (cmpeq gives -1) until they are summed, before a lane
 * can overflow: 255 vectors for bytes, 32767 for 16-bit lanes (madd reads them as signed). */
#define QG_EQ_SCALAR(T)                                                                           \
    for (; k < len; k++)                                                                          \
        total += a[k] == b[k];

static size_t count_eq8(const uint8_t *a, const uint8_t *b, size_t len)
{
    size_t total = 0, k = 0;
#ifdef QG_SCAN_SSE2
    while (len - k >= 16) {
        size_t blocks = (len - k) / 16;
        if (blocks > 255)
            blocks = 255;
        __m128i acc = _mm_setzero_si128();
        for (size_t j = 0; j < blocks; j++, k += 16)
            acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(a + k)),
                                                    _mm_loadu_si128((const __m128i *)(b + k))));
        __m128i sums = _mm_sad_epu8(acc, _mm_setzero_si128());
        total += (size_t)_mm_cvtsi128_si32(sums) + (size_t)_mm_cvtsi128_si32(_mm_srli_si128(sums, 8));
    }
#endif
    QG_EQ_SCALAR(uint8_t)
    return total;
}

static size_t count_eq16(const uint16_t *a, const uint16_t *b, size_t len)
{
    size_t total = 0, k = 0;
#ifdef QG_SCAN_SSE2
    while (len - k >= 8) {
        size_t blocks = (len - k) / 8;
        if (blocks > 32767)
            blocks = 32767;
        __m128i acc = _mm_setzero_si128();
        for (size_t j = 0; j < blocks; j++, k += 8)
            acc = _mm_sub_epi16(acc, _mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *)(a + k)),
                                                     _mm_loadu_si128((const __m128i *)(b + k))));
        __m128i s4 = _mm_madd_epi16(acc, _mm_set1_epi16(1));
        s4 = _mm_add_epi32(s4, _mm_srli_si128(s4, 8));
        s4 = _mm_add_epi32(s4, _mm_srli_si128(s4, 4));
        total += (size_t)(uint32_t)_mm_cvtsi128_si32(s4);
    }
#endif
    QG_EQ_SCALAR(uint16_t)
    return total;
}

static size_t count_eq32(const uint32_t *a, const uint32_t *b, size_t len)
{
    size_t total = 0, k = 0;
#ifdef QG_SCAN_SSE2
    while (len - k >= 4) {
        size_t blocks = (len - k) / 4;
        if (blocks > 0x3FFFFFFF)
            blocks = 0x3FFFFFFF;
        __m128i acc = _mm_setzero_si128();
        for (size_t j = 0; j < blocks; j++, k += 4)
            acc = _mm_sub_epi32(acc, _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(a + k)),
                                                     _mm_loadu_si128((const __m128i *)(b + k))));
        acc = _mm_add_epi32(acc, _mm_srli_si128(acc, 8));
        acc = _mm_add_epi32(acc, _mm_srli_si128(acc, 4));
        total += (size_t)(uint32_t)_mm_cvtsi128_si32(acc);
    }
#endif
    QG_EQ_SCALAR(uint32_t)
    return total;
}

#ifdef QG_SCAN_DISPATCH
/* The same counts in 32-byte vectors, two accumulators deep. */
#define QG_EQ_AVX2(NAME, T, LANES, LIMIT, CMP, SUB, FINISH)                                       \
    __attribute__((target("avx2"))) static size_t NAME(const T *a, const T *b, size_t len)        \
    {                                                                                             \
        size_t total = 0, k = 0;                                                                  \
        while (len - k >= 2 * (LANES)) {                                                          \
            size_t blocks = (len - k) / (2 * (LANES));                                            \
            if (blocks > (LIMIT))                                                                 \
                blocks = (LIMIT);                                                                 \
            __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();                 \
            for (size_t j = 0; j < blocks; j++, k += 2 * (LANES)) {                               \
                acc0 = SUB(acc0, CMP(_mm256_loadu_si256((const __m256i *)(a + k)),                \
                                     _mm256_loadu_si256((const __m256i *)(b + k))));              \
                acc1 = SUB(acc1, CMP(_mm256_loadu_si256((const __m256i *)(a + k + (LANES))),      \
                                     _mm256_loadu_si256((const __m256i *)(b + k + (LANES)))));    \
            }                                                                                     \
            FINISH                                                                                \
        }                                                                                         \
        QG_EQ_SCALAR(T)                                                                           \
        return total;                                                                             \
    }

QG_EQ_AVX2(count_eq8_avx2, uint8_t, 32, 255, _mm256_cmpeq_epi8, _mm256_sub_epi8, {
    __m256i sums = _mm256_add_epi64(_mm256_sad_epu8(acc0, _mm256_setzero_si256()),
                                    _mm256_sad_epu8(acc1, _mm256_setzero_si256()));
    __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
    total += (size_t)_mm_cvtsi128_si32(s2) + (size_t)_mm_cvtsi128_si32(_mm_srli_si128(s2, 8));
})
QG_EQ_AVX2(count_eq16_avx2, uint16_t, 16, 32767, _mm256_cmpeq_epi16, _mm256_sub_epi16, {
    __m256i ones = _mm256_set1_epi16(1);
    __m256i s8 = _mm256_add_epi32(_mm256_madd_epi16(acc0, ones), _mm256_madd_epi16(acc1, ones));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_srli_si128(s4, 8));
    s4 = _mm_add_epi32(s4, _mm_srli_si128(s4, 4));
    total += (size_t)(uint32_t)_mm_cvtsi128_si32(s4);
})
QG_EQ_AVX2(count_eq32_avx2, uint32_t, 8, 0x1FFFFFFF, _mm256_cmpeq_epi32, _mm256_sub_epi32, {
    __m256i s8 = _mm256_add_epi32(acc0, acc1);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_srli_si128(s4, 8));
    s4 = _mm_add_epi32(s4, _mm_srli_si128(s4, 4));
    total += (size_t)(uint32_t)_mm_cvtsi128_si32(s4);
})
#endif

/* The matches at period p that the rule counts (_scan_py.glued_counted): every unit equal to the
 * one p before, except that an ASCII unit other than a letter (a digit, punctuation, a symbol)
 * counts only inside a stretch of at least QG_GLUED_STRETCH (8) consecutive matches. Commas, "0."
 * and ":" recurring at the step of a number list match sparsely; copies of a piece match
 * throughout. Branch-free byte loops gcc vectorizes: e[k] = (u[k] == u[k + p]) for the n = len - p
 * positions compared, w[k] = e[k .. k + 8) all set (a stretch of 8 starts at k), and a match at k
 * counts when its unit is strong (not such an ASCII unit) or one of w[k - 7 .. k] is set. e and w
 * have 8 zero bytes before them (the caller's) and 8 after (set here). */
#define QG_GLUED_EQ(NAME, T)                                                                      \
    static void NAME(const T *u, size_t n, size_t p, uint8_t *e)                                  \
    {                                                                                             \
        for (size_t k = 0; k < n; k++)                                                            \
            e[k] = u[k] == u[k + p];                                                              \
    }

QG_GLUED_EQ(glued_eq8, uint8_t)
QG_GLUED_EQ(glued_eq16, uint16_t)
QG_GLUED_EQ(glued_eq32, uint32_t)

static size_t glued_counted(uint8_t *e, uint8_t *w, const uint8_t *strong, size_t n)
{
    size_t total = 0;
    memset(e + n, 0, QG_GLUED_STRETCH);
    for (size_t k = 0; k < n; k++)
        w[k] = e[k] & e[k + 1] & e[k + 2] & e[k + 3] & e[k + 4] & e[k + 5] & e[k + 6] & e[k + 7];
    size_t k = 0;
#ifdef QG_SCAN_SSE2
    /* The same sum, 16 bytes at a time, added up by psadbw (gcc widens the bytes otherwise). */
    __m128i acc = _mm_setzero_si128();
    for (; n - k >= 16; k += 16) {
#define QG_LD(P) _mm_loadu_si128((const __m128i *)(P))
        __m128i any = _mm_or_si128(_mm_or_si128(_mm_or_si128(QG_LD(w + k), QG_LD(w + k - 1)),
                                                _mm_or_si128(QG_LD(w + k - 2), QG_LD(w + k - 3))),
                                   _mm_or_si128(_mm_or_si128(QG_LD(w + k - 4), QG_LD(w + k - 5)),
                                                _mm_or_si128(QG_LD(w + k - 6), QG_LD(w + k - 7))));
        any = _mm_and_si128(QG_LD(e + k), _mm_or_si128(any, QG_LD(strong + k)));
#undef QG_LD
        acc = _mm_add_epi64(acc, _mm_sad_epu8(any, _mm_setzero_si128()));
    }
    total = (size_t)_mm_cvtsi128_si32(acc) + (size_t)_mm_cvtsi128_si32(_mm_srli_si128(acc, 8));
#endif
    for (; k < n; k++)
        total += e[k] & (strong[k] | w[k] | w[k - 1] | w[k - 2] | w[k - 3] | w[k - 4] | w[k - 5] |
                         w[k - 6] | w[k - 7]);
    return total;
}

/* The best period of units u[0..len) (width 1, 2 or 4 bytes): the most counted matches, the
 * smallest period on ties; matches 0 (period 0) when none counts at a period in range. Counted
 * matches are at most the equal units, which the vectors count: the scalar count runs only for a
 * period whose equal units could beat the best so far and the cap (a run that cannot exceed the
 * cap reports nothing, so its best below the cap need not be exact), and not at all when the run
 * has no ASCII unit other than a letter (strong NULL), where the two counts are the same. */
static void glued_best(const void *u, int width, size_t len, const uint8_t *strong, uint8_t *e,
                       uint8_t *w, double cap, int64_t *period, int64_t *matches)
{
    size_t max_p = len / 2, best_m = 0, best_p = 0;
    int avx2 = 0;
#ifdef QG_SCAN_DISPATCH
    /* Racing first calls store the same value; QG_SCAN_GENERIC forces SSE2, as for the scan. */
    static volatile int has_avx2 = -1;
    if (has_avx2 < 0) {
        __builtin_cpu_init();
        has_avx2 = __builtin_cpu_supports("avx2") && !getenv("QG_SCAN_GENERIC");
    }
    avx2 = has_avx2;
#endif
    if (max_p > QG_GLUED_MAX_PERIOD)
        max_p = QG_GLUED_MAX_PERIOD;
    for (size_t p = 1; p <= max_p; p++) {
        size_t m;
#ifdef QG_SCAN_DISPATCH
        if (avx2)
            m = width == 1   ? count_eq8_avx2((const uint8_t *)u, (const uint8_t *)u + p, len - p)
                : width == 2 ? count_eq16_avx2((const uint16_t *)u, (const uint16_t *)u + p, len - p)
                             : count_eq32_avx2((const uint32_t *)u, (const uint32_t *)u + p, len - p);
        else
#endif
            m = width == 1   ? count_eq8((const uint8_t *)u, (const uint8_t *)u + p, len - p)
                : width == 2 ? count_eq16((const uint16_t *)u, (const uint16_t *)u + p, len - p)
                             : count_eq32((const uint32_t *)u, (const uint32_t *)u + p, len - p);
        (void)avx2;
        if (strong) {
            if (m <= best_m || !((double)m / (double)len > cap))
                continue;
            if (width == 1)
                glued_eq8((const uint8_t *)u, len - p, p, e);
            else if (width == 2)
                glued_eq16((const uint16_t *)u, len - p, p, e);
            else
                glued_eq32((const uint32_t *)u, len - p, p, e);
            m = glued_counted(e, w, strong, len - p);
        }
        if (m > best_m) {
            best_m = m;
            best_p = p;
        }
    }
    *period = (int64_t)best_p;
    *matches = (int64_t)best_m;
}

/* Judge the run of len units in units[] starting at `position`; 0, or QG_SCAN_NOMEM. */
static int glued_run(uint32_t *units, size_t len, uint32_t max_unit, int weak, int64_t position,
                     double cap, qg_glued_out *out)
{
    int64_t period, matches;
    uint8_t *strong = NULL, *e = NULL, *wb = NULL;
    if (weak) {
        /* strong[k]: unit k counts wherever it matches; e and w with their zero margins. */
        uint8_t *buf = calloc(3 * len + 4 * QG_GLUED_STRETCH, 1);
        if (!buf)
            return QG_SCAN_NOMEM;
        strong = buf;
        e = buf + len + QG_GLUED_STRETCH;
        wb = e + len + 2 * QG_GLUED_STRETCH;
        for (size_t k = 0; k < len; k++)
            strong[k] = units[k] >= 0x80 || (uint32_t)((units[k] | 0x20) - 'a') < 26;
    }
    /* Narrowed in place, front to back: unit k is read before element k is written, and element
     * k lies below unit k. */
    if (max_unit < 0x100) {
        uint8_t *w = (uint8_t *)units;
        for (size_t k = 0; k < len; k++)
            w[k] = (uint8_t)units[k];
        glued_best(w, 1, len, strong, e, wb, cap, &period, &matches);
    } else if (max_unit < 0x10000) {
        uint16_t *w = (uint16_t *)units;
        for (size_t k = 0; k < len; k++)
            w[k] = (uint16_t)units[k];
        glued_best(w, 2, len, strong, e, wb, cap, &period, &matches);
    } else {
        glued_best(units, 4, len, strong, e, wb, cap, &period, &matches);
    }
    free(strong);
    /* The reference's matches / length > cap: a correctly rounded double quotient, like Python's
     * int / int for values below 2**53. */
    if (!((double)matches / (double)len > cap))
        return 0;
    if (out->n_runs == out->cap_runs) {
        size_t cap_runs = out->cap_runs ? 2 * out->cap_runs : 8;
        qg_glued *grown = realloc(out->runs, cap_runs * sizeof *grown);
        if (!grown)
            return QG_SCAN_NOMEM;
        out->runs = grown;
        out->cap_runs = cap_runs;
    }
    qg_glued *g = &out->runs[out->n_runs++];
    g->position = position;
    g->length = (int64_t)len;
    g->period = period;
    g->matches = matches;
    return 0;
}

/* Whether s holds QG_GLUED_MIN_RUN bytes in a row none of which is ASCII whitespace. Without such
 * a stretch there is no run to judge: a unit is at least one byte, and an ASCII whitespace byte
 * always ends a run (other bytes may or may not). Looks at the last byte of each candidate window
 * first, then back to the nearest whitespace, so prose costs a few byte tests per word instead of
 * decoding every byte (the 500-token benchmark query: about 5 us of decoding skipped). */
static int has_stretch(const uint8_t *s, size_t n, const uint8_t *cls)
{
    size_t p = 0;
    while (n - p >= QG_GLUED_MIN_RUN) {
        size_t k = p + QG_GLUED_MIN_RUN;
        while (k > p && !(s[k - 1] < 0x80 && (cls[s[k - 1]] & C_WS)))
            k--;
        if (k == p)
            return 1; /* s[p .. p + QG_GLUED_MIN_RUN) holds no ASCII whitespace */
        p = k;        /* every window starting at or before k - 1 contains s[k - 1] */
    }
    return 0;
}

int qg_glued_scan(const uint8_t *s, size_t n, int str_input, double cap, qg_glued_out *out)
{
    const uint8_t *cls = ascii_class();
    uint32_t *units = NULL;
    size_t len = 0, room = 0, i = 0;
    uint32_t max_unit = 0;
    int weak = 0; /* the run holds an ASCII unit other than a letter */
    int64_t unit_index = 0, run_at = 0;
    int rc = QG_SCAN_OK;
    if (n > QG_SCAN_MAX_BYTES)
        return QG_SCAN_TOO_BIG;
    out->runs = NULL;
    out->n_runs = out->cap_runs = 0;
    if (!has_stretch(s, n, cls))
        return QG_SCAN_OK;
    while (i <= n) {
        uint32_t cp = 0;
        int ws = 1, step = 1;
        if (i < n) {
            uint8_t b = s[i];
            if (b < 0x80) {
                cp = b;
                ws = (cls[b] & C_WS) != 0;
            } else {
                step = decode(s, n, i, str_input, &cp);
                if (step == 0) {
                    step = 1;
                    cp = 0xDC00u + b;
                    ws = 0;
                } else {
                    ws = is_unicode_space(cp);
                }
            }
        }
        if (ws) {
            if (len >= QG_GLUED_MIN_RUN && (rc = glued_run(units, len, max_unit, weak, run_at, cap, out)))
                break;
            len = 0;
            max_unit = 0;
            weak = 0;
        } else {
            if (len == 0)
                run_at = str_input ? unit_index : (int64_t)i;
            if (len == room) {
                size_t more = room ? 2 * room : 256;
                uint32_t *grown = realloc(units, more * sizeof *grown);
                if (!grown) {
                    rc = QG_SCAN_NOMEM;
                    break;
                }
                units = grown;
                room = more;
            }
            units[len++] = cp;
            if (cp > max_unit)
                max_unit = cp;
            weak |= cp < 0x80 && (uint32_t)((cp | 0x20) - 'a') >= 26;
        }
        if (i == n)
            break;
        i += (size_t)step;
        unit_index++;
    }
    free(units);
    if (rc) {
        qg_glued_out_free(out);
        return rc;
    }
    return QG_SCAN_OK;
}

void qg_glued_out_free(qg_glued_out *out)
{
    free(out->runs);
    out->runs = NULL;
    out->n_runs = out->cap_runs = 0;
}
