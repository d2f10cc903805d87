/* Structural query scanner (see scan.h). The definitions live in qdrant_guard/_scan_py.py; the
 * oracle tests compare this file against it on every case.
 *
 * Shape: one left-to-right pass over the bytes. Runs of printable ASCII are consumed by a tight
 * inner loop; everything else (whitespace, controls, escape triggers, non-ASCII) takes the general
 * path. Tokens are hashed when they end, into an open-addressing table allocated once. */
#include "scan.h"

#include <stdlib.h>
#include <string.h>

#define MAX_NGRAM 8

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

typedef struct {
    uint64_t hash;
    uint64_t head;   /* first 8 bytes, zero-padded: equality for tokens of <= 8 bytes */
    size_t offset;   /* where the first occurrence starts */
    int64_t last;    /* index of the latest occurrence */
    uint32_t len;
} token_entry;

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

    /* tokens */
    uint32_t *slots;
    size_t mask;
    token_entry *entries;
    uint32_t ring_id[16];
    int64_t ring_pos[16];
    int64_t streak[MAX_NGRAM + 1], streak_tok[MAX_NGRAM + 1], streak_pos[MAX_NGRAM + 1];
    int streaking;
    int64_t best_tok;
    size_t room; /* distinct tokens the table holds before it grows */
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

static void scan_escape(scanner *st, size_t i, int64_t position)
{
    const uint8_t *s = st->s;
    size_t n = st->n, j = i;
    int64_t count = 0;
    int kind;
    if (s[i] == '%') {
        while (j < n && s[j] == '%' && hex_run(st, j + 1, 2)) {
            j += 3;
            count++;
        }
        kind = QG_K_PERCENT;
        if (count && (st->rules->min_percent_run < 0 || count < st->rules->min_percent_run)) {
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

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 32;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 32;
    return x;
}

/* The bytes p[0..len), 1 <= len <= 8, zero-padded into a word. */
static inline uint64_t load_word(const uint8_t *p, size_t len, const uint8_t *end)
{
    uint64_t w = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (end - p >= 8) {
        memcpy(&w, p, 8);
        return len == 8 ? w : w & (~0ull >> (64 - 8 * len));
    }
#else
    (void)end;
#endif
    memcpy(&w, p, len);
    return w;
}

/* Blob runs inside one token s[a..b) (runs never cross whitespace). */
static void scan_blobs(scanner *st, size_t a, size_t b, int64_t position)
{
    const uint8_t *s = st->s;
    int64_t min_len = st->rules->min_blob_len;
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
        int upper = 0, lower = 0, symbol = 0;
        while (i < b && (st->cls[s[i]] & C_B64)) {
            uint8_t c = st->cls[s[i]];
            all &= c;
            any |= c;
            upper |= s[i] >= 'A' && s[i] <= 'Z';
            lower |= s[i] >= 'a' && s[i] <= 'z';
            symbol |= !(c & C_ALNUM);
            i++;
        }
        size_t len = i - start;
        if ((int64_t)len >= min_len) {
            int digit = (any & C_DIGIT) != 0;
            if ((all & C_HEX) && digit && (upper || lower))
                push_mark(st, QG_K_HEXBLOB, position, (int64_t)len, 0);
            else if ((digit || symbol) && upper && lower)
                push_mark(st, QG_K_BASE64, position, (int64_t)len, 0);
        }
        position += (int64_t)len;
    }
}

static void ngram_step(scanner *st, int64_t k, uint32_t id, int64_t distance, int64_t position)
{
    qg_scan_out *o = st->out;
    st->ring_id[k & 15] = id;
    st->ring_pos[k & 15] = position;
    if (distance < 1 || distance > MAX_NGRAM) {
        /* No equal token among the previous 8: every streak is broken. */
        if (st->streaking) {
            memset(st->streak, 0, sizeof st->streak);
            st->streaking = 0;
        }
        return;
    }
    st->streaking = 1;
    for (int64_t g = 1; g <= MAX_NGRAM; g++) {
        if (k < g || st->ring_id[(k - g) & 15] != id) {
            st->streak[g] = 0;
            continue;
        }
        if (st->streak[g]++ == 0) {
            st->streak_tok[g] = k - g;
            st->streak_pos[g] = st->ring_pos[(k - g) & 15];
        }
        if (st->streak[g] < g)
            continue;
        int64_t len = st->streak[g] + g, at = st->streak_tok[g];
        if (len > o->run_length ||
            (len == o->run_length && (at < st->best_tok || (at == st->best_tok && g < o->run_n)))) {
            o->run_length = len;
            o->run_n = g;
            o->run_at = st->streak_pos[g];
            st->best_tok = at;
        }
    }
}

/* Make room for `tokens` distinct tokens (slots at most half full), rehashing what is there. */
static int grow_table(scanner *st, size_t tokens)
{
    size_t cap = 16;
    while (cap < 2 * tokens)
        cap *= 2;
    uint32_t *slots = (uint32_t *)calloc(cap, sizeof *slots);
    token_entry *entries = (token_entry *)realloc(st->entries, tokens * sizeof *entries);
    if (!slots || !entries) {
        free(slots);
        if (entries)
            st->entries = entries;
        return 0;
    }
    for (uint32_t id = 0; id < (uint32_t)st->out->unique_tokens; id++) {
        size_t slot = (size_t)entries[id].hash & (cap - 1);
        while (slots[slot])
            slot = (slot + 1) & (cap - 1);
        slots[slot] = id + 1;
    }
    free(st->slots);
    st->slots = slots;
    st->entries = entries;
    st->mask = cap - 1;
    st->room = tokens;
    return 1;
}

static void end_token(scanner *st, size_t a, size_t b, int64_t position, int64_t letters,
                      int64_t other_ascii, int64_t non_ascii)
{
    qg_scan_out *o = st->out;
    const qg_scan_rules *r = st->rules;
    const uint8_t *s = st->s, *end = st->s + st->n;
    int64_t k = o->token_count++;
    if (k == r->max_tokens)
        o->token_cap_at = position;
    o->model_tokens += (letters + 3) / 4 + other_ascii + non_ascii;
    if (r->max_model_tokens >= 0 && o->model_cap_at < 0 && o->model_tokens > r->max_model_tokens)
        o->model_cap_at = position;

    size_t len = b - a;
    uint64_t head = load_word(s + a, len < 8 ? len : 8, end);
    uint64_t h = mix64(head ^ (len * 0x9E3779B97F4A7C15ull));
    for (size_t p = a + 8; p < b; p += 8)
        h = mix64(h ^ load_word(s + p, b - p < 8 ? b - p : 8, end));
    size_t slot = (size_t)h & st->mask;
    uint32_t id;
    int64_t distance = 0;
    for (;;) {
        uint32_t v = st->slots[slot];
        if (v == 0) {
            if ((size_t)o->unique_tokens == st->room) {
                if (!grow_table(st, 2 * st->room)) {
                    st->nomem = 1;
                    return;
                }
                slot = (size_t)h & st->mask;
                continue;
            }
            id = (uint32_t)o->unique_tokens++;
            token_entry *e = &st->entries[id];
            e->hash = h;
            e->head = head;
            e->offset = a;
            e->last = k;
            e->len = (uint32_t)len;
            st->slots[slot] = id + 1;
            break;
        }
        token_entry *e = &st->entries[v - 1];
        if (e->head == head && e->len == len &&
            (len <= 8 || (e->hash == h && memcmp(s + e->offset + 8, s + a + 8, len - 8) == 0))) {
            id = v - 1;
            distance = k - e->last;
            e->last = k;
            if (o->first_repeat < 0)
                o->first_repeat = position;
            break;
        }
        slot = (slot + 1) & st->mask;
    }
    ngram_step(st, k, id, distance, position);
    if (r->encoded_payloads && r->min_blob_len >= 0 && (int64_t)len >= r->min_blob_len)
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
    if (cp == 0xAD || cp == 0x180E || cp == 0x200B || cp == 0x200C || cp == 0x2060) {
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
 * The pass */

int qg_scan(const uint8_t *s, size_t n, const qg_scan_rules *rules, qg_scan_out *out)
{
    if (n > QG_SCAN_MAX_BYTES)
        return QG_SCAN_TOO_BIG;
    out->first_repeat = out->token_cap_at = out->model_cap_at = -1;

    scanner st;
    memset(&st, 0, sizeof st);
    st.s = s;
    st.n = n;
    st.rules = rules;
    st.cls = ascii_class();
    st.out = out;
    st.run_kind = -1;
    st.chain_end = st.selector_end = SIZE_MAX; /* no chain ends before the first byte */

    /* At most n/2 + 1 distinct tokens, but real text has far fewer: start with room for
     * min(n/2 + 1, 4096) and double when half full. Sizing for the worst case up front made every
     * large scan zero megabytes of table it never touched. */
    size_t want = n / 2 + 1 < 4096 ? n / 2 + 1 : 4096;
    if (!grow_table(&st, want)) {
        free(st.slots);
        free(st.entries);
        return QG_SCAN_NOMEM;
    }

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
            end_token(&st, tok_start, i, tok_pos, letters, other_ascii, non_ascii);                \
            in_token = 0;                                                                          \
        }                                                                                          \
    } while (0)

    while (i < n) {
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
    }
    END_TOKEN();
#undef START_TOKEN
#undef END_TOKEN

    free(st.slots);
    free(st.entries);
    if (st.nomem) {
        qg_scan_out_free(out);
        return QG_SCAN_NOMEM;
    }
    return QG_SCAN_OK;
}

void qg_scan_out_free(qg_scan_out *out)
{
    free(out->marks);
    out->marks = NULL;
    out->n_marks = out->cap_marks = 0;
}
