/* Secret/PII detector: one pass over UTF-8 bytes with cheap anchors, validators in C.
 *
 * The specification is qdrant_guard/_detect_py.py; every function here mirrors the reference
 * function of the same name, and tests/test_detect_oracle.py holds them equal. All character
 * classes are ASCII, so a byte >= 0x80 is "other" exactly as a non-ASCII code point is in the
 * reference, and offsets stay byte offsets until the end. Bounded reads (the "limit" arguments)
 * only ever cover ASCII bytes, so their byte counts equal the reference's code-point counts;
 * the keyword windows, which may cross non-ASCII text, count code points explicitly.
 */
#include "detect.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const qg_type_names[QG_NTYPES] = {
    "PRIVATE_KEY", "AWS_ACCESS_KEY", "AWS_SECRET_KEY", "GITHUB_TOKEN", "GITLAB_TOKEN",
    "SLACK_TOKEN", "STRIPE_KEY", "ANTHROPIC_KEY", "OPENAI_KEY", "GOOGLE_API_KEY", "GOOGLE_OAUTH_SECRET",
    "NPM_TOKEN", "PYPI_TOKEN", "SENDGRID_KEY", "TWILIO_KEY", "HUGGINGFACE_TOKEN", "SHOPIFY_TOKEN", "DIGITALOCEAN_TOKEN",
    "MAILGUN_KEY", "DATABRICKS_TOKEN", "POSTMAN_KEY", "LINEAR_KEY", "DOPPLER_TOKEN", "AZURE_STORAGE_KEY", "JWT", "DATABASE_URL_PASSWORD",
    "GENERIC_SECRET", "IBAN", "CREDIT_CARD", "SSN", "EMAIL", "PHONE",
};

const char *const qg_validator_names[QG_NVALIDATORS] = {
    "aws-context", "e164", "entropy>=3.5", "entropy>=4.5", "format", "jwt-header-json",
    "luhn", "mod97", "nanp", "passphrase", "password-charset", "pem-armor", "pem-begin", "ssa-rules", "url-userinfo",
};

typedef struct {
    size_t start, end; /* byte offsets; a card floor is ASCII, so its code points run alike */
} card_span;

typedef struct {
    const unsigned char *b;
    size_t n;
    qg_findings *out;
    int oom;
    card_span *floors; /* card_floor's cards, by start */
    size_t nfloors, floors_cap;
} scan_t;

/* ------------------------------------------------------------------ character classes */
static inline int is_digit(int c) { return c >= '0' && c <= '9'; }
static inline int is_upper(int c) { return c >= 'A' && c <= 'Z'; }
static inline int is_lower(int c) { return c >= 'a' && c <= 'z'; }
static inline int is_alpha(int c) { return is_upper(c) || is_lower(c); }
static inline int is_alnum(int c) { return is_digit(c) || is_alpha(c); }
static inline int is_word(int c) { return is_alnum(c) || c == '_'; }
/* Numbers (SSN, card, IBAN, phone) end at letters and digits only (is_alnum): "_123-45-6789_"
   (Markdown emphasis) or "ssn_123456789" is still the number. */
static inline int is_word_dash(int c) { return is_word(c) || c == '-'; }
static inline int is_alnum_dash(int c) { return is_alnum(c) || c == '-'; }
static inline int is_b64(int c) { return is_alnum(c) || c == '+' || c == '/'; }
static inline int is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static inline int is_printable(int c) { return c >= 0x21 && c <= 0x7e; }
static inline int is_base32(int c) { return is_upper(c) || (c >= '2' && c <= '7'); }
static inline int lower_ascii(int c) { return is_upper(c) ? c + 32 : c; }
static inline int is_local(int c) { return is_word(c) || c == '.' || c == '%' || c == '+' || c == '-'; }
static inline int is_domain(int c) { return is_alnum(c) || c == '.' || c == '-'; }
static inline int is_url_segment(int c) {
    return is_printable(c) && c != '"' && c != '\'' && c != '<' && c != '>' && c != '`' && c != '(' && c != ')';
}
static inline int is_scheme(int c) { return is_alnum(c) || c == '+' || c == '.' || c == '-'; }
static inline int is_authority(int c) {
    return is_printable(c) && c != '/' && c != '"' && c != '\'' && c != '<' && c != '>' && c != '`';
}
static inline int is_pem_label(int c) { return is_upper(c) || is_digit(c) || c == ' '; }
static inline int is_pem_body(int c) {
    return is_b64(c) || c == '=' || c == '\r' || c == '\n' || c == '\t' || c == ' ' || c == '\\';
}
static inline int is_name(int c) { return is_word(c) || c == '.' || c == '-'; }
static inline int is_bare(int c) { return is_printable(c) && !strchr("\"'`,;(){}[]<>", c); }
static inline int is_value(int c) { return c >= 0x20 && c <= 0x7e; }
/* strchr() also "finds" the terminating NUL, which would put byte 0 in every set. */
static inline int in_set(int c, const char *set) { return c > 0 && strchr(set, c) != NULL; }

/* Byte at i, or -1 outside the text (the reference's empty string). */
static inline int at(const scan_t *s, int64_t i) { return (i >= 0 && (size_t)i < s->n) ? s->b[i] : -1; }

#define RUN_END(s, i, pred, limit)                                       \
    ({                                                                   \
        size_t _lim = (size_t)(i) + (size_t)(limit);                     \
        size_t _e = (size_t)(i);                                         \
        if (_lim > (s)->n) _lim = (s)->n;                                \
        while (_e < _lim && pred((s)->b[_e])) _e++;                      \
        _e;                                                              \
    })

static int starts_with(const scan_t *s, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return i + k <= s->n && memcmp(s->b + i, lit, k) == 0;
}

/* Case-insensitive (ASCII) search of lit in [a, e). */
static int contains_ci(const unsigned char *b, size_t a, size_t e, const char *lit) {
    size_t k = strlen(lit);
    if (e < a || e - a < k) return 0;
    for (size_t i = a; i + k <= e; i++) {
        size_t j = 0;
        while (j < k && lower_ascii(b[i + j]) == lit[j]) j++;
        if (j == k) return 1;
    }
    return 0;
}

static int64_t find_lit(const scan_t *s, const char *lit, size_t k, size_t from, size_t to) {
    if (to > s->n) to = s->n;
    for (size_t i = from; i + k <= to; i++)
        if (s->b[i] == (unsigned char)lit[0] && memcmp(s->b + i, lit, k) == 0) return (int64_t)i;
    return -1;
}

/* Start of the window of `width` code points before byte offset `start`. */
static size_t window_start(const scan_t *s, size_t start, int width) {
    size_t j = start;
    int count = 0;
    while (j > 0 && count < width) {
        j--;
        if ((s->b[j] & 0xC0) != 0x80) count++;
    }
    return j;
}

static int window_has(const scan_t *s, size_t start, int width, const char *k1, const char *k2) {
    size_t w = window_start(s, start, width);
    return contains_ci(s->b, w, start, k1) || contains_ci(s->b, w, start, k2);
}

static int ascii_alpha(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

/* "ssn" in [w, start) as a word of its own: "SSN", or not glued to a letter before it, or starting
   a camelCase word ("userSsn"). Any "ssn" also matched "businessNumber" and "classNumber". */
static int ssn_word(const scan_t *s, size_t w, size_t start) {
    const unsigned char *b = s->b;
    for (size_t i = w; i + 3 <= start; i++) {
        if (lower_ascii(b[i]) != 's' || lower_ascii(b[i + 1]) != 's' || lower_ascii(b[i + 2]) != 'n') continue;
        if ((b[i] == 'S' && b[i + 1] == 'S' && b[i + 2] == 'N') || i == 0 || !ascii_alpha(b[i - 1])
            || (b[i] == 'S' && b[i - 1] >= 'a' && b[i - 1] <= 'z'))
            return 1;
    }
    return 0;
}

/* The context of a bare SSN: "ssn" as a word (ssn_word), or "social" and "security" joined by one
   space, '_' or '-' or by nothing (JSON/YAML keys spell it social_security_number or
   socialSecurityNumber). */
static int ssn_context(const scan_t *s, size_t start) {
    size_t w = window_start(s, start, 40);
    return ssn_word(s, w, start) || contains_ci(s->b, w, start, "social security")
        || contains_ci(s->b, w, start, "social_security") || contains_ci(s->b, w, start, "social-security")
        || contains_ci(s->b, w, start, "socialsecurity");
}

/* The array items of len items of `size` bytes, with room for one more (capacity *cap, doubled
 * from `first`): items itself, moved, or NULL when out of memory (items then still valid). */
static void *room(void *items, size_t *cap, size_t len, size_t size, size_t first) {
    if (len < *cap) return items;
    size_t want = *cap ? *cap * 2 : first;
    void *grown = realloc(items, want * size);
    if (grown) *cap = want;
    return grown;
}

static void emit(scan_t *s, size_t start, size_t end, int type, int validator) {
    qg_findings *o = s->out;
    qg_finding *items = room(o->items, &o->cap, o->len, sizeof *items, 64);
    if (!items) {
        s->oom = 1;
        return;
    }
    o->items = items;
    o->items[o->len++] = (qg_finding){(int64_t)start, (int64_t)end, type, validator};
}

static double entropy(const unsigned char *v, size_t n) {
    size_t counts[128] = {0};
    for (size_t i = 0; i < n; i++) counts[v[i] & 0x7f]++;
    double h = 0.0;
    for (int c = 0; c < 128; c++) {
        if (counts[c]) {
            double p = (double)counts[c] / (double)n;
            h -= p * log2(p);
        }
    }
    return h;
}

static const char *const PLACEHOLDER_WORDS[] = {
    "password", "passwd", "pass", "pwd", "secret", "changeme", "changeit", "redacted",
    "placeholder", "dummy", "test", "none", "null", "empty", "todo", "fixme", "admin",
    "root", "default", "hunter2", "letmein", "token", "apikey", "api_key", "mypassword",
    "yourpassword", NULL,
};
static const char *const PLACEHOLDER_PREFIXES[] = {
    "$", "{{", "<", "%(", "%{", "#{", "your", "insert", "replace", "enter_", "enter-", NULL,
};

static int eq_ci(const unsigned char *v, size_t n, const char *w) {
    if (n == 0 || lower_ascii(v[0]) != w[0]) return n == 0 && w[0] == 0;
    size_t k = strlen(w);
    if (k != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (lower_ascii(v[i]) != w[i]) return 0;
    return 1;
}

static int prefix_ci(const unsigned char *v, size_t n, const char *w) {
    size_t k = strlen(w);
    if (k > n) return 0;
    for (size_t i = 0; i < k; i++)
        if (lower_ascii(v[i]) != w[i]) return 0;
    return 1;
}

static int is_placeholder(const unsigned char *v, size_t n) {
    if (n == 0) return 1;
    if (contains_ci(v, 0, n, "example") || contains_ci(v, 0, n, "xxxx") || contains_ci(v, 0, n, "****"))
        return 1;
    for (int i = 0; PLACEHOLDER_PREFIXES[i]; i++)
        if (prefix_ci(v, n, PLACEHOLDER_PREFIXES[i])) return 1;
    size_t same = 0;
    while (same < n && v[same] == v[0]) same++;
    if (same == n) return 1;
    for (int i = 0; PLACEHOLDER_WORDS[i]; i++)
        if (eq_ci(v, n, PLACEHOLDER_WORDS[i])) return 1;
    return 0;
}

static int has_example(const scan_t *s, size_t a, size_t e) { return contains_ci(s->b, a, e, "example"); }

static void classes(const unsigned char *v, size_t n, int *lo, int *up, int *dg) {
    *lo = *up = *dg = 0;
    for (size_t i = 0; i < n; i++) {
        *lo |= is_lower(v[i]);
        *up |= is_upper(v[i]);
        *dg |= is_digit(v[i]);
    }
}

/* ------------------------------------------------------------------------ numeric chains */
#define MAX_GROUPS 6

static int ssa_valid(const char *d) {
    int area = (d[0] - '0') * 100 + (d[1] - '0') * 10 + (d[2] - '0');
    if (area == 0 || area == 666 || area >= 900) return 0;
    if (d[3] == '0' && d[4] == '0') return 0;
    if (d[5] == '0' && d[6] == '0' && d[7] == '0' && d[8] == '0') return 0;
    return strncmp(d, "078051120", 9) != 0 && strncmp(d, "219099999", 9) != 0;
}

static int luhn(const char *d, int nd) {
    int total = 0;
    for (int k = 0; k < nd; k++) {
        int v = d[nd - 1 - k] - '0';
        if (k % 2 == 1) {
            v *= 2;
            if (v > 9) v -= 9;
        }
        total += v;
    }
    return total % 10 == 0;
}

static int iin_known(const char *d) {
    int p2 = (d[0] - '0') * 10 + (d[1] - '0');
    int p3 = p2 * 10 + (d[2] - '0');
    int p4 = p3 * 10 + (d[3] - '0');
    return d[0] == '4' || (p2 >= 51 && p2 <= 55) || (p4 >= 2221 && p4 <= 2720) || p2 == 34 || p2 == 37 ||
           p4 == 6011 || p2 == 65 || (p3 >= 644 && p3 <= 649) || (p3 >= 300 && p3 <= 305) || p2 == 36 ||
           p2 == 38 || (p4 >= 3528 && p4 <= 3589) || p2 == 62 || p2 == 50 || p2 == 56 || p2 == 57 ||
           p2 == 58 || p2 == 67;
}

static int groups_eq(const int *g, int ng, const int *want, int nw) {
    if (ng != nw) return 0;
    for (int k = 0; k < ng; k++)
        if (g[k] != want[k]) return 0;
    return 1;
}

static int card_groups_ok(const int *g, int ng, int sep) {
    static const int amex[] = {4, 6, 5}, diners[] = {4, 6, 4};
    if (ng == 1) return 1;
    if (sep != ' ' && sep != '-' && sep != '.') return 0;
    if (groups_eq(g, ng, amex, 3) || groups_eq(g, ng, diners, 3)) return 1;
    for (int k = 0; k < ng - 1; k++)
        if (g[k] != 4) return 0;
    return g[ng - 1] >= 1 && g[ng - 1] <= 4;
}

static void set_hit(qg_finding *hit, size_t start, size_t end, int type, int validator) {
    *hit = (qg_finding){(int64_t)start, (int64_t)end, type, validator};
}

/* Words a '+' may be glued to and still start a phone number ("tel+44 20 7946 0958"); any other
 * letter or digit before the '+' makes it no phone number's ("x+1 234-56-7890" keeps its SSN).
 * _PHONE_WORDS of the reference. */
static const char *const PHONE_WORDS[] = {"tel", "phone", "ph", "mobile", "mob", "cell", "fax", NULL};

/* Whether the character at j, before a '+' (or the '(' of "(+CC)"), lets a phone number start
 * after it: no letter or digit, or the end of a word of PHONE_WORDS (any case) that no letter or
 * digit comes before. */
static int plus_free(const scan_t *s, int64_t j) {
    int c = at(s, j);
    if (!(c >= 0 && is_alnum(c))) return 1;
    int64_t a = j;
    while (a >= 0 && is_alpha(s->b[a]) && j - a < 7) a--;
    if (a >= 0 && is_alnum(s->b[a])) return 0;
    for (int w = 0; PHONE_WORDS[w]; w++)
        if (eq_ci(s->b + a + 1, (size_t)(j - a), PHONE_WORDS[w])) return 1;
    return 0;
}

/* Where the country code before the number at i starts: "+CC " (its '+') or "(+CC)" with one
 * optional space after it (its '('), CC being 1-3 digits, the first not 0, not glued to a letter or
 * digit before it but a phone word's (plus_free), and its digit count in *cc; -1 when there is none. A number after a country
 * code is a phone number's rest, whatever its grouping ("+1 234-56-7890", "+1 234.56.7890"). */
static int64_t country_code_at(const scan_t *s, size_t i, int *cc) {
    int64_t j = (int64_t)i - 1;
    if (at(s, j) == ' ') j--;
    int paren = at(s, j) == ')';
    if (paren) j--;
    else if (j == (int64_t)i - 1) return -1;
    int64_t last = j;
    while (last - j < 4 && is_digit(at(s, j))) j--;
    if (last - j < 1 || last - j > 3 || at(s, j + 1) == '0' || at(s, j) != '+') return -1;
    j--;
    if (paren) {
        if (at(s, j) != '(') return -1;
        j--;
    }
    if (!plus_free(s, j)) return -1;
    *cc = (int)(last - j) - 1 - paren;
    return j + 1;
}

/* Where the phone number starts whose rest, after a country code (country_code_at), is the dotted
 * groups g[0:ng] from i ("+1 234.567.8901", "+33 6.12.34.56.78"): 8-15 digits with the country
 * code's, every group after the first at least 2 digits long (versions have short ones:
 * "+1 10.0.19041.1"), not four groups of 1-3 digits (an IPv4 address); -1 when it is none. */
static int64_t dotted_phone(const scan_t *s, size_t i, const int *g, int ng, size_t nd, int *cc) {
    if (ng < 2 || (ng == 4 && g[0] <= 3 && g[1] <= 3 && g[2] <= 3 && g[3] <= 3)) return -1;
    for (int k = 1; k < ng; k++)
        if (g[k] < 2) return -1;
    int64_t code = country_code_at(s, i, cc);
    return code >= 0 && nd + (size_t)*cc >= 8 && nd + (size_t)*cc <= 15 ? code : -1;
}

/* Country calling codes ITU-T has assigned (E.164; 1 and 7 shared by several countries), each
 * between spaces. A number written with "00" for the '+' (0049 30 1234567), or glued to its '+' by
 * a '.' (+44.20.7946.0958), is read only with one of these: "0012 3456 7890" is a zero-padded
 * number, "+12.34.56.78" a signed one. _CC_ASSIGNED of the reference. */
static const char CC_ASSIGNED[] =
    " 1 7 20 27 30 31 32 33 34 36 39 40 41 43 44 45 46 47 48 49 51 52 53 54 55 56 57 58 60 61 62"
    " 63 64 65 66 81 82 84 86 90 91 92 93 94 95 98 211 212 213 216 218 220 221 222 223 224 225"
    " 226 227 228 229 230 231 232 233 234 235 236 237 238 239 240 241 242 243 244 245 246 247 248"
    " 249 250 251 252 253 254 255 256 257 258 260 261 262 263 264 265 266 267 268 269 290 291 297"
    " 298 299 350 351 352 353 354 355 356 357 358 359 370 371 372 373 374 375 376 377 378 379 380"
    " 381 382 383 385 386 387 389 420 421 423 500 501 502 503 504 505 506 507 508 509 590 591 592"
    " 593 594 595 596 597 598 599 670 672 673 674 675 676 677 678 679 680 681 682 683 685 686 687"
    " 688 689 690 691 692 800 808 850 852 853 855 856 870 878 880 881 882 883 886 888 960 961 962"
    " 963 964 965 966 967 968 970 971 972 973 974 975 976 977 979 992 993 994 995 996 998 ";

/* Whether the n (1-3) digits at d are an assigned country code. */
static int cc_assigned(const char *d, int n) {
    char key[6];
    if (n < 1 || n > 3) return 0;
    key[0] = ' ';
    memcpy(key + 1, d, (size_t)n);
    key[n + 1] = ' ';
    key[n + 2] = 0;
    return strstr(CC_ASSIGNED, key) != NULL;
}

/* Whether dotted groups g[0:ng] (digits d, nd of them) right after a '+' are an E.164 number with
 * dots for spaces ("+44.20.7946.0958", "+33.6.12.34.56.78"): an assigned country code and 2+ more
 * groups, those after the first of them 2+ digits long, not all of 3 ("+1.234.567", a signed
 * number with thousands separators), not four groups of 1-3 digits (an IPv4 address), 10-15
 * digits ("+3.14159265" is a signed decimal), 11 after the code 1 (NANP's length). */
static int plus_dotted(const int *g, int ng, const char *d, size_t nd) {
    if (ng < 3 || g[0] > 3 || !cc_assigned(d, g[0]) || nd < 10 || nd > 15) return 0;
    if (g[0] == 1 && d[0] == '1' && nd != 11) return 0;
    if (ng == 4 && g[0] <= 3 && g[1] <= 3 && g[2] <= 3 && g[3] <= 3) return 0;
    int not3 = 0;
    for (int k = 1; k < ng; k++) {
        if (k >= 2 && g[k] < 2) return 0;
        not3 |= g[k] != 3;
    }
    return not3;
}

/* Where a NANP number whose area code in parentheses starts at p starts: at the trunk 1 before it
 * ("1 (234) 567-8901", "1-(234)", "1(234)"), a 1 with no letter or digit, nor a digit and one of
 * "-./:", before it; else p. */
static int64_t trunk_one(const scan_t *s, int64_t p) {
    int64_t q = in_set(at(s, p - 1), " -") ? p - 1 : p;
    if (at(s, q - 1) != '1') return p;
    int before = at(s, q - 2);
    if ((before >= 0 && is_alnum(before)) || (in_set(before, "-./:") && is_digit(at(s, q - 3)))) return p;
    return q - 1;
}

/* Where "(DDD)" starts that the number at i follows, directly or after one space or hyphen, with no
 * letter or digit before it but a trunk 1 (trunk_one); -1 if none. */
static int64_t paren_area(const scan_t *s, size_t i) {
    int64_t p = (int64_t)i - 5 - (in_set(at(s, (int64_t)i - 1), " -") ? 1 : 0);
    if (!(p >= 0 && s->b[p] == '(' && s->b[p + 4] == ')' && is_digit(s->b[p + 1]) && is_digit(s->b[p + 2]) &&
          is_digit(s->b[p + 3])))
        return -1;
    int pp = at(s, p - 1);
    return !(pp >= 0 && is_alnum(pp)) || trunk_one(s, p) < p ? p : -1;
}

/* The chain rules for groups g[0:ng] (digits d, the first 19 kept) from i to end; on a match, fills
 * hit and returns 1. */
static int chain_match(scan_t *s, size_t i, const int *g, int ng, const char *d, size_t nd, int sep,
                       size_t end, qg_finding *hit) {
    static const int G_SSN[] = {3, 2, 4}, G_NANP[] = {3, 3, 4}, G_NANP1[] = {1, 3, 3, 4}, G_LOCAL[] = {3, 4},
                     G_AREA_SSN[] = {2, 4}, G_TRUNK_SSN[] = {1, 3, 2, 4};
    int prev = at(s, (int64_t)i - 1), cc;
    int after = at(s, (int64_t)end);
    if (after >= 0 && is_alnum(after)) return 0;
    if (in_set(after, "-./:") && is_digit(at(s, (int64_t)end + 1))) return 0;
    if (prev == '+') {
        int free = plus_free(s, (int64_t)i - 2);
        if (free && (sep == 0 || sep == ' ' || sep == '-') && nd >= 8 && nd <= 15 && d[0] != '0') {
            set_hit(hit, i - 1, end, QG_PHONE, QG_V_E164);
            return 1;
        }
        if (free && sep == '.' && plus_dotted(g, ng, d, nd)) {
            set_hit(hit, i - 1, end, QG_PHONE, QG_V_E164);
            return 1;
        }
        /* Not a phone number from its '+' (glued to a word not a phone word, or not E.164's shape): the number is
         * read as if the '+' were not there, so "ssn+123-45-6789" still holds an SSN. */
    }
    int64_t dotted = sep == '.' ? dotted_phone(s, i, g, ng, nd, &cc) : -1;
    if (dotted >= 0) {
        set_hit(hit, (size_t)dotted, end, QG_PHONE, QG_V_E164);
        return 1;
    }
    if (groups_eq(g, ng, G_SSN, 3) && (sep == ' ' || sep == '-' || sep == '.')) {
        /* after a country code: ' ' and '-' are e164_grouped's (from the '+', or the '(' in chain_find),
         * '.' dotted_phone's */
        if (!ssa_valid(d)) return 0;
        set_hit(hit, i, end, QG_SSN, QG_V_SSA);
        return 1;
    }
    if (ng == 1 && g[0] == 9 && ssn_context(s, i)) {
        if (!ssa_valid(d)) return 0;
        set_hit(hit, i, end, QG_SSN, QG_V_SSA);
        return 1;
    }
    if (nd >= 13 && nd <= 19 && card_groups_ok(g, ng, sep) && iin_known(d) && luhn(d, (int)nd)) {
        set_hit(hit, i, end, QG_CREDIT_CARD, QG_V_LUHN);
        return 1;
    }
    if (sep == '-' || sep == '.' || sep == ' ') {
        if ((groups_eq(g, ng, G_NANP, 3) && d[0] >= '2') || (groups_eq(g, ng, G_NANP1, 4) && d[0] == '1' && d[1] >= '2')) {
            set_hit(hit, i, end, QG_PHONE, QG_V_NANP);
            return 1;
        }
    }
    if (groups_eq(g, ng, G_TRUNK_SSN, 4) && sep == '-' && d[0] == '1' && d[1] >= '2') {
        /* "1-234-56-7890": the trunk or country code 1, then a 3-2-4 (as "+1 234-56-7890") */
        set_hit(hit, i, end, QG_PHONE, QG_V_E164);
        return 1;
    }
    int area_ssn = groups_eq(g, ng, G_AREA_SSN, 2) && sep == '-';
    if ((groups_eq(g, ng, G_LOCAL, 2) && (sep == '-' || sep == '.')) || area_ssn) {
        int64_t p = paren_area(s, i);
        if (p < 0) return 0;
        if (area_ssn) { /* "(123)-45-6789", "+(123) 45-6789": an SSN's area in parentheses */
            char v[9];
            memcpy(v, s->b + p + 1, 3);
            memcpy(v + 3, d, 6);
            if (!ssa_valid(v)) return 0;
            set_hit(hit, (size_t)p, end, QG_SSN, QG_V_SSA);
            return 1;
        }
        if (s->b[p + 1] >= '2') {
            set_hit(hit, (size_t)trunk_one(s, p), end, QG_PHONE, QG_V_NANP);
            return 1;
        }
    }
    return 0;
}

static int chain_find(scan_t *s, size_t i, int veto, qg_finding *hit);

/* Whether a later number of the first p groups from i starts a finding of its own that runs past
 * end: the prefix would take part of it and leave the rest in the clear ("4000 1005 1111 123 45
 * 6789" is a Luhn-valid 15-digit "card" ending inside the SSN 123 45 6789). */
static int cuts_later(scan_t *s, size_t i, const int *g, int p, size_t end) {
    size_t pos = i;
    qg_finding later;
    for (int q = 1; q < p; q++) {
        pos += (size_t)g[q - 1] + 1;
        if (chain_find(s, pos, 0, &later) && (size_t)later.end > end) return 1;
    }
    return 0;
}

/* The digit run at j: its digits appended to d (only the first 19 are kept: longer chains never
 * match, nd still counts them); returns where the run ends. */
static inline size_t take_digits(const unsigned char *b, size_t n, size_t j, char *d, size_t *nd) {
    while (j < n && is_digit(b[j])) {
        if (*nd < 19) d[*nd] = (char)b[j];
        (*nd)++;
        j++;
    }
    return j;
}

/* The digit groups of the number run from i, joined by single separators of `allowed` each
 * followed by a digit: their lengths in g, the separators in seps, the digits in d (the first 19)
 * counted in *nd. Returns how many groups; *end: where the last one ends; *more: the run goes on
 * past MAX_GROUPS groups. */
static int take_groups(const unsigned char *b, size_t n, size_t i, const char *allowed, int *g, int *seps,
                       char *d, size_t *nd, size_t *end, int *more) {
    int ng = 0;
    size_t j = i;
    *more = 0;
    for (;;) {
        size_t k = take_digits(b, n, j, d, nd);
        g[ng++] = (int)(k - j);
        j = k;
        if (!(j + 1 < n && in_set(b[j], allowed) && is_digit(b[j + 1]))) break;
        if (ng == MAX_GROUPS) {
            *more = 1;
            break;
        }
        seps[ng - 1] = b[j];
        j++;
    }
    *end = j;
    return ng;
}

/* chain_find with one consistent separator. */
static int chain_same(scan_t *s, size_t i, int veto, qg_finding *hit) {
    const unsigned char *b = s->b;
    size_t n = s->n;
    int g[MAX_GROUPS];
    int ng = 0, whole = 1; /* whole = 0: the chain runs on past MAX_GROUPS groups */
    char d[20];
    size_t nd = 0; /* total digits; only the first 19 are kept (longer chains never match) */
    int sep = 0;
    size_t j = i;
    for (;;) {
        size_t k = take_digits(b, n, j, d, &nd);
        g[ng++] = (int)(k - j);
        j = k;
        if (ng == MAX_GROUPS) {
            whole = !(j + 1 < n && b[j] == sep && is_digit(b[j + 1]));
            break;
        }
        if (j + 1 < n && (b[j] == ' ' || b[j] == '-' || b[j] == '.') && is_digit(b[j + 1]) && (!sep || b[j] == sep)) {
            sep = b[j];
            j++;
            continue;
        }
        break;
    }
    /* The veto holds for the whole run too: its last group may start a number read across dashes,
     * "+44 20 7946 123--45--6789", whose finding it would cut. */
    if (whole && chain_match(s, i, g, ng, d, nd, sep, j, hit) && !(veto && cuts_later(s, i, g, ng, j))) return 1;
    if (sep != ' ') return 0;
    /* A list of numbers separated by spaces ("4111111111111111 4012888888881881") chains into one
     * run that matches nothing: its longest leading groups that do match are the finding. */
    size_t end = j, digits = nd;
    for (int p = whole ? ng - 1 : ng; p > 0; p--) {
        if (p < ng) {
            end -= (size_t)g[p] + 1;
            digits -= (size_t)g[p];
        }
        if (!chain_match(s, i, g, p, d, digits, p > 1 ? sep : 0, end, hit)) continue;
        /* "sizes 512 64 1024 2048": a list of numbers has 3-2-4 windows everywhere */
        if (hit->type == QG_SSN && !ssn_context(s, i)) continue;
        if (!(veto && cuts_later(s, i, g, p, end))) return 1;
    }
    return 0;
}

/* The 4 digits at v are a year 1800-2099. */
static int year_1800_2099(const char *v) {
    return (v[0] == '1' && v[1] >= '8') || (v[0] == '2' && v[1] == '0');
}

/* Groups joined by single spaces and hyphens, both used, read as an SSN, a card or a NANP phone
 * number ("123-45 6789", "4111-1111 1111-1111", "1-800 555-0199"; a NANP number with a space
 * before its last group only where that group is no year 1800-2099: "259-264 1970" is pages and
 * a year); E.164 numbers are e164_grouped's. */
static int chain_mixed(scan_t *s, size_t i, int veto, qg_finding *hit) {
    static const int G_SSN[] = {3, 2, 4}, G_NANP[] = {3, 3, 4}, G_NANP1[] = {1, 3, 3, 4};
    const unsigned char *b = s->b;
    size_t n = s->n;
    int g[MAX_GROUPS], seps[MAX_GROUPS];
    int ng = 0;
    char d[20];
    size_t nd = 0;
    size_t j = i;
    for (;;) {
        size_t k = take_digits(b, n, j, d, &nd);
        g[ng++] = (int)(k - j);
        j = k;
        if (ng == MAX_GROUPS || !(j + 1 < n && (b[j] == ' ' || b[j] == '-') && is_digit(b[j + 1]))) break;
        seps[ng - 1] = b[j];
        j++;
    }
    /* The longest leading groups that read as a card or an SSN, with both separators among them.
     * Where more numbers follow (only after a space: "-" and a digit end nothing), the rules of a
     * list of numbers apply (see chain_same): an SSN needs its context, and a prefix must not cut
     * a later number's own finding. */
    for (int p = ng < 5 ? ng : 5; p > 1; p--) {
        int space = 0, dash = 0;
        size_t end = i, digits = 0;
        for (int q = 0; q < p; q++) {
            end += (size_t)g[q] + (q ? 1 : 0);
            digits += (size_t)g[q];
            if (q) {
                space |= seps[q - 1] == ' ';
                dash |= seps[q - 1] == '-';
            }
        }
        if (!(space && dash)) continue;
        int after = at(s, (int64_t)end);
        if (after >= 0 && is_alnum(after)) continue;
        if (in_set(after, "-./:") && is_digit(at(s, (int64_t)end + 1))) continue;
        if (groups_eq(g, p, G_SSN, 3)) {
            if (!ssa_valid(d) || (p < ng && !ssn_context(s, i))) continue;
            set_hit(hit, i, end, QG_SSN, QG_V_SSA);
        } else if (digits >= 13 && digits <= 19 && card_groups_ok(g, p, ' ') && iin_known(d) && luhn(d, (int)digits)) {
            set_hit(hit, i, end, QG_CREDIT_CARD, QG_V_LUHN);
        } else if (((groups_eq(g, p, G_NANP, 3) && d[0] >= '2') ||
                    (groups_eq(g, p, G_NANP1, 4) && d[0] == '1' && d[1] >= '2')) &&
                   (seps[p - 2] == '-' || !year_1800_2099(d + digits - 4))) {
            /* a space before the line number only where it is no year: "259-264 1970" is pages and a year */
            set_hit(hit, i, end, QG_PHONE, QG_V_NANP);
        } else {
            continue;
        }
        if (!(veto && p < ng && cuts_later(s, i, g, p, end))) return 1;
    }
    return 0;
}

/* v holds "YYYY-MM-DD": a year 1900-2099, a month 01-12 and a day 01-31. */
static int iso_date(const unsigned char *v) {
    int month = (v[5] - '0') * 10 + (v[6] - '0'), day = (v[8] - '0') * 10 + (v[9] - '0');
    return ((v[0] == '1' && v[1] == '9') || (v[0] == '2' && v[1] == '0')) && month >= 1 && month <= 12 && day >= 1 &&
           day <= 31;
}

/* The width of the dash separator at j that a digit follows: "-", "--", " - " or " -- " (in the
 * folded view en and em dashes are "-" too); 0 when there is none. */
static inline int dash_sep(const scan_t *s, int64_t j) {
    int w = 0;
    if (at(s, j) == '-') w = at(s, j + 1) == '-' ? 2 : 1;
    else if (at(s, j) == ' ' && at(s, j + 1) == '-')
        w = at(s, j + 2) == ' ' ? 3 : (at(s, j + 2) == '-' && at(s, j + 3) == ' ') ? 4 : 0;
    return w && is_digit(at(s, j + w)) ? w : 0;
}

/* Whether the first p groups g of the number run from i, ending at end with `total` digits counting
 * the country code's, make a whole E.164 number: 8-15 digits, not run on by a letter or digit or
 * by a "-", ".", "/" or ":" before a digit, and (check_list) not cutting a later number's finding
 * where the run lists several. */
static int e164_ends(scan_t *s, size_t i, const int *g, int p, size_t end, size_t total, int check_list) {
    if (total < 8 || total > 15) return 0;
    int after = at(s, (int64_t)end);
    if (after >= 0 && is_alnum(after)) return 0;
    if (in_set(after, "-./:") && is_digit(at(s, (int64_t)end + 1))) return 0;
    return !(check_list && cuts_later(s, i, g, p, end));
}

/* An E.164 number whose digits run from i in groups joined by single spaces and hyphens, mixed or
 * not ("+1 234-56-7890"), or follow a parenthesised country code of cc digits ("(+1) 234-56-7890");
 * the finding starts at start. Its longest leading groups with 8-15 digits in all (the country
 * code's included) that end a number; the list rule's veto applies (see chain_same), to the whole
 * run too: its last group may start a number read across dashes ("+44 20 7946 123--45--6789"). */
static int e164_grouped(scan_t *s, size_t i, size_t start, int cc, int veto, qg_finding *hit) {
    const unsigned char *b = s->b;
    size_t n = s->n;
    int g[MAX_GROUPS], seps[MAX_GROUPS];
    int more; /* the chain runs on past MAX_GROUPS groups */
    char d[20];
    size_t nd = 0, j;
    int ng = take_groups(b, n, i, " -", g, seps, d, &nd, &j, &more);
    if (!cc && d[0] == '0') return 0;
    /* "+1 2023-10-15", "(+2) 2023-10-15 12": a count or an offset, then an ISO date */
    int date = ng;
    size_t pos = i;
    for (int k = 0; k + 2 < ng && date == ng; k++) {
        if (g[k] == 4 && g[k + 1] == 2 && g[k + 2] == 2 && seps[k] == '-' && seps[k + 1] == '-' && iso_date(b + pos))
            date = k;
        pos += (size_t)g[k] + 1;
    }
    size_t end = j, digits = nd;
    for (int p = ng; p > 0; p--) {
        if (p < ng) {
            end -= (size_t)g[p] + 1;
            digits -= (size_t)g[p];
        }
        if (p > date + 2) continue;
        if (!e164_ends(s, i, g, p, end, digits + (size_t)cc, veto)) continue;
        set_hit(hit, start, end, QG_PHONE, QG_V_E164);
        return 1;
    }
    return 0;
}


/* Groups joined by dashes, "-", "--", " - " or " -- " (a hyphen, or in the folded view an en or em
 * dash, alone or doubled, with a space on each side), in any mix ("123 - 45 - 6789",
 * "123--45--6789", "123 -- 45 -- 6789", "123 - 45-6789"),
 * read as an SSN (3-2-4, SSA rules; after a country code starting at code >= 0, the phone number it
 * ends) or a card (its groupings, IIN, Luhn) only; not where such a dash and a digit come before it
 * (a longer run of numbers, a sum, a range) or after it. */
static int chain_dashed(scan_t *s, size_t i, int64_t code, qg_finding *hit) {
    static const int G_SSN[] = {3, 2, 4};
    const unsigned char *b = s->b;
    size_t n = s->n;
    if (is_digit(at(s, (int64_t)i - 3)) && dash_sep(s, (int64_t)i - 2) == 2) return 0;
    if (is_digit(at(s, (int64_t)i - 4)) && dash_sep(s, (int64_t)i - 3) == 3) return 0;
    if (is_digit(at(s, (int64_t)i - 5)) && dash_sep(s, (int64_t)i - 4) == 4) return 0;
    int g[MAX_GROUPS];
    int ng = 0, w, space = 0, wide = 0;
    char d[20];
    size_t nd = 0;
    size_t j = i;
    for (;;) {
        size_t k = take_digits(b, n, j, d, &nd);
        g[ng++] = (int)(k - j);
        j = k;
        if (!(w = dash_sep(s, (int64_t)j)) && at(s, (int64_t)j) == ' ' && is_digit(at(s, (int64_t)j + 1))) {
            w = 1; /* a single space: only among "--" or " - " ("123 - 45 6789") */
            space = 1;
        } else if (w >= 2) {
            wide = 1;
        }
        if (!w) break;
        if (ng == MAX_GROUPS) return 0;
        j += (size_t)w;
    }
    if (ng < 2 || (space && !wide)) return 0;
    int after = at(s, (int64_t)j);
    if (after >= 0 && is_alnum(after)) return 0;
    if (in_set(after, "-./:") && is_digit(at(s, (int64_t)j + 1))) return 0;
    if (groups_eq(g, ng, G_SSN, 3)) {
        if (!ssa_valid(d)) return 0;
        if (code >= 0) set_hit(hit, (size_t)code, j, QG_PHONE, QG_V_E164);
        else set_hit(hit, i, j, QG_SSN, QG_V_SSA);
        return 1;
    }
    if (nd >= 13 && nd <= 19 && card_groups_ok(g, ng, '-') && iin_known(d) && luhn(d, (int)nd)) {
        set_hit(hit, i, j, QG_CREDIT_CARD, QG_V_LUHN);
        return 1;
    }
    return 0;
}

/* A phone number written "+CC (area) rest" or with the trunk prefix in parentheses, "+CC (0)rest"
 * ("+1 (234) 567-8901", "+44 (0)20 7946 0958"), i the country code's first digit after its '+':
 * CC 1-3 digits, the first not 0, an optional space, 1-4 digits in parentheses (a lone 0 is the
 * trunk prefix, not dialled from abroad, and not counted), an optional space or hyphen, then the
 * rest as e164_grouped reads it. */
static int paren_rest(scan_t *s, size_t k, size_t start, int cc, int veto, qg_finding *hit);

static int e164_paren(scan_t *s, size_t i, int veto, qg_finding *hit) {
    const unsigned char *b = s->b;
    size_t n = s->n, k = i, start = i - 1;
    while (k < n && is_digit(b[k]) && k - i < 4) k++;
    int cc = (int)(k - i);
    if (cc > 3 || b[i] == '0') return 0;
    if (at(s, (int64_t)i - 2) == '(' && at(s, (int64_t)k) == ')') {
        start = i - 2;
        k++;
    }
    return paren_rest(s, k, start, cc, veto, hit);
}

/* After a country code of cc digits ending at k (the finding starts at start): an optional space,
 * 1-4 digits in parentheses (a lone 0 is the trunk prefix, not dialled from abroad, and not
 * counted), an optional space or hyphen, then the rest as e164_grouped reads it, or dotted
 * ("+1 (234) 567.8901": 2+ groups of 2+ digits, not four groups of 1-3 digits, 8-15 digits with
 * the codes', nothing dotted or a digit after it). */
static int paren_rest(scan_t *s, size_t k, size_t start, int cc, int veto, qg_finding *hit) {
    const unsigned char *b = s->b;
    size_t n = s->n;
    if (at(s, (int64_t)k) == ' ') k++;
    if (at(s, (int64_t)k) != '(') return 0;
    size_t a = ++k;
    while (k < n && is_digit(b[k]) && k - a < 5) k++;
    int area = (int)(k - a);
    if (area < 1 || area > 4 || at(s, (int64_t)k) != ')') return 0;
    if (area == 1 && b[a] == '0') area = 0;
    k++;
    if (in_set(at(s, (int64_t)k), " -") && is_digit(at(s, (int64_t)k + 1))) k++;
    if (!is_digit(at(s, (int64_t)k))) return 0;
    size_t e = k;
    while (e < n && is_digit(b[e])) e++;
    if (at(s, (int64_t)e) == '.' && is_digit(at(s, (int64_t)e + 1))) {
        int g[MAX_GROUPS], ng = 1, small = 0, nd;
        g[0] = (int)(e - k);
        nd = g[0];
        while (at(s, (int64_t)e) == '.' && is_digit(at(s, (int64_t)e + 1)) && ng < MAX_GROUPS) {
            size_t f = e + 1;
            while (f < n && is_digit(b[f])) f++;
            g[ng++] = (int)(f - e - 1);
            nd += (int)(f - e - 1);
            e = f;
        }
        for (int q = 0; q < ng; q++) small |= g[q] < 2;
        int after = at(s, (int64_t)e), ipv4 = ng == 4 && g[0] <= 3 && g[1] <= 3 && g[2] <= 3 && g[3] <= 3;
        if (small || ipv4 || nd + cc + area < 8 || nd + cc + area > 15 || (after >= 0 && is_alnum(after)) ||
            (in_set(after, "-./:") && is_digit(at(s, (int64_t)e + 1))))
            return 0;
        set_hit(hit, start, e, QG_PHONE, QG_V_E164);
        return 1;
    }
    return e164_grouped(s, k, start, cc + area, veto, hit);
}

/* An exit code for the '+' of an E.164 number: "00" glued to an assigned country code (CC_ASSIGNED:
 * "0049 30 1234567", "0044 (0)20 7946 0958"), or "00" or the North American "011" apart from it by
 * a space or hyphen ("00 44 20 7946 0958", "011 44 20 7946 0958"); then a space or hyphen and the
 * rest as e164_grouped reads it (its first digit not 0 but after Italy's 39, which keeps its 0;
 * 10-15 digits with the code's, 11 after the code 1, NANP's length: "0044 822463" is short), or
 * the rest with an area code or trunk prefix in parentheses (paren_rest); not after a digit and a
 * space (a table's digit groups: "1.999 007 501 2699"). With the exit code apart, the rest read
 * by e164_grouped is not all of 2-digit groups (hex bytes: "00 44 20 79 46 09 58") and after the
 * code 1 starts 2-9, as NANP area codes do (binary: "011 1 101 110 0111"). The exit code glued to
 * the country code is read for "00" only: "01144" is a ZIP code of Massachusetts. */
static int intl00(scan_t *s, size_t i, int veto, qg_finding *hit) {
    const unsigned char *b = s->b;
    size_t n = s->n, k = i, c = i + 2; /* c: where the country code starts */
    int apart = 0;
    if (at(s, (int64_t)i - 1) == ' ' && is_digit(at(s, (int64_t)i - 2))) return 0;
    while (k < n && is_digit(b[k]) && k - i < 6) k++;
    if ((k - i == 2 && b[i + 1] == '0') || (k - i == 3 && b[i + 1] == '1' && b[i + 2] == '1')) {
        if (!(in_set(at(s, (int64_t)k), " -") && is_digit(at(s, (int64_t)k + 1)))) return 0;
        apart = 1;
        c = ++k;
        while (k < n && is_digit(b[k]) && k - c < 4) k++;
    } else if (b[i + 1] != '0') {
        return 0;
    }
    int len = (int)(k - c);
    if (len < 1 || len > 3 || !cc_assigned((const char *)b + c, len)) return 0;
    int nanp = len == 1 && b[c] == '1';
    if (in_set(at(s, (int64_t)k), " -") && is_digit(at(s, (int64_t)k + 1))) {
        if (b[k + 1] == '0' && !(len == 2 && b[c] == '3' && b[c + 1] == '9')) return 0;
        if (apart && nanp && b[k + 1] < '2') return 0;
        if (!e164_grouped(s, k + 1, i, len, veto, hit)) return 0;
        int nd = len, run = 0, two = 1;
        for (size_t q = k + 1; q < (size_t)hit->end; q++) {
            if (is_digit(b[q])) {
                nd++;
                run++;
            } else {
                two &= run == 2;
                run = 0;
            }
        }
        if (apart && two && run == 2) return 0;
        return nd == 11 || (!nanp && nd >= 10 && nd <= 15);
    }
    return paren_rest(s, k, i, len, veto, hit);
}

/* A phone number after a country code (country_code_at; code is where it starts, cc its digit
 * count) whose groups from i are joined by single dots, spaces and hyphens, one dot and another
 * separator among them ("+1 415.555-0123", "+44 20.7946 0958"): its longest leading groups with
 * 8-15 digits with the code's, every group after the first 2+ digits long, not all of 3 digits
 * (thousands), that end a number; the list rule's veto as in
 * e164_grouped. A second dot makes it numbers: "+1 12.50-13.75", "+1 12.50 13.75 14.25" are a
 * sign and decimals, "+1 192.168.10-20" an address (one dot is no IPv4 address). */
static int e164_dotmix(scan_t *s, size_t i, size_t code, int cc, int veto, qg_finding *hit) {
    const unsigned char *b = s->b;
    size_t n = s->n;
    int g[MAX_GROUPS], seps[MAX_GROUPS];
    int more;
    char d[20];
    size_t nd = 0, j;
    int ng = take_groups(b, n, i, " -.", g, seps, d, &nd, &j, &more);
    size_t end = j, digits = nd;
    for (int p = ng; p > 1; p--) {
        if (p < ng) {
            end -= (size_t)g[p] + 1;
            digits -= (size_t)g[p];
        }
        int dots = 0, other = 0, small = 0, not3 = g[0] != 3;
        for (int q = 1; q < p; q++) {
            dots += seps[q - 1] == '.';
            other |= seps[q - 1] != '.';
            small |= g[q] < 2;
            not3 |= g[q] != 3;
        }
        if (dots != 1 || !other || small || !not3) continue;
        if (!e164_ends(s, i, g, p, end, digits + (size_t)cc, veto)) continue;
        set_hit(hit, code, end, QG_PHONE, QG_V_E164);
        return 1;
    }
    return 0;
}

/* The finding of the number run from i (veto = 0: a list prefix is taken even where it cuts a
 * later number's finding): after a parenthesised country code as a phone number, else after a
 * country code with a dot mixed into its separators (e164_dotmix), else with one
 * consistent separator, else after a '+' as a phone number with spaces and hyphens mixed, else
 * (or "+CC (area) rest", e164_paren), else (an SSN, a card or a NANP phone number) with spaces and
 * hyphens mixed ("123-45 6789", "4111-1111 1111-1111"), else (an SSN or a card) with dashes,
 * doubled or spaced, between its groups (chain_dashed); fills hit and returns 1 when there is one. */
static int chain_find(scan_t *s, size_t i, int veto, qg_finding *hit) {
    int prev = at(s, (int64_t)i - 1);
    if (prev >= 0 && is_alnum(prev)) return 0;
    if (in_set(prev, "-./:") && is_digit(at(s, (int64_t)i - 2))) return 0;
    int cc = 0;
    int64_t code = country_code_at(s, i, &cc);
    if (code >= 0 && s->b[code] == '(' && e164_grouped(s, i, (size_t)code, cc, veto, hit))
        return 1;
    if (code >= 0 && e164_dotmix(s, i, (size_t)code, cc, veto, hit)) return 1;
    if (chain_same(s, i, veto, hit)) return 1;
    if (prev == '+') {
        if (plus_free(s, (int64_t)i - 2) && (e164_grouped(s, i, i - 1, 0, veto, hit) || e164_paren(s, i, veto, hit)))
            return 1;
    }
    if (s->b[i] == '0' && in_set(at(s, (int64_t)i + 1), "01") && intl00(s, i, veto, hit)) return 1;
    return chain_mixed(s, i, veto, hit) || chain_dashed(s, i, code, hit);
}

static void chain(scan_t *s, size_t i) {
    qg_finding hit;
    if (chain_find(s, i, 1, &hit)) emit(s, (size_t)hit.start, (size_t)hit.end, hit.type, hit.validator);
}

/* The longest card read from the digit group at i whatever number is glued to it before or after
 * ("555 123-4111 1111 1111 1111", "4111-1111-1111-1111-2"): 13-19 digits in a card's groups, a
 * known IIN and Luhn, the groups joined by single spaces and dashes ("-", "--", " - ", " -- ") in
 * any mix, or by dots alone; not glued to a letter, and in one group not glued to a '.' that a
 * digit is on the other side of (a decimal; a ':' or '/' is none: a time, a ratio or a date has no
 * 13-19 digit part, so "12:4111111111111111" is a card). The readers above leave
 * such a card unread or cut; cover_cards covers it. _card_floor of the reference. */
/* Whether the digit group through k (its last digit for step -1, its first for +1) is glued to
 * another by a dot on the side away from the card: "555.123.4111111111111111" is no decimal, as a
 * decimal has one dot. _dot_run of the reference. */
static int dot_run(const scan_t *s, int64_t k, int step) {
    while (is_digit(at(s, k + step))) k += step;
    return at(s, k + step) == '.' && is_digit(at(s, k + 2 * step));
}

static int glue_before(const scan_t *s, int64_t j);

/* Whether the digit group ending at k is 3 digits joined by a space, a dot or a dash separator (or
 * by nothing, after an area code) to a whole 3-digit group or a "(555)" area code before it:
 * "555 123.4111111111111111" is a phone number glued to a card by a dot, no decimal; not after a
 * letter, a decimal or a thousands separator. _phone_head of the reference. */
static int phone_head(const scan_t *s, int64_t k) {
    int64_t a = k - 2;
    if (!is_digit(at(s, a)) || !is_digit(at(s, a + 1)) || is_digit(at(s, a - 1))) return 0;
    int64_t p = a - glue_before(s, a) - 1; /* the last character before the glue */
    if (at(s, p) == ')')
        return at(s, p - 4) == '(' && is_digit(at(s, p - 3)) && is_digit(at(s, p - 2)) && is_digit(at(s, p - 1));
    if (!is_digit(at(s, p - 2)) || !is_digit(at(s, p - 1)) || !is_digit(at(s, p))) return 0;
    int c = at(s, p - 3);
    return !is_alnum(c) && !(in_set(c, ".,:/") && is_digit(at(s, p - 4)));
}

static void card_floor(scan_t *s, size_t i) {
    int prev = at(s, (int64_t)i - 1);
    if (prev >= 0 && is_alpha(prev)) return;
    int point = prev == '.' && is_digit(at(s, (int64_t)i - 2)) &&
                !(prev == '.' && (dot_run(s, (int64_t)i - 2, -1) || phone_head(s, (int64_t)i - 2)));
    int g[5], ng = 0, dotted = -1;
    char d[20];
    size_t nd = 0, j = i;
    int64_t best = -1;
    for (;;) {
        size_t k = j;
        while (k < s->n && is_digit(s->b[k]) && k - j < 20) k++;
        if (nd + (k - j) > 19) break;
        memcpy(d + nd, s->b + j, k - j);
        nd += k - j;
        g[ng++] = (int)(k - j);
        j = k;
        if (nd >= 13 && card_groups_ok(g, ng, ' ') && iin_known(d) && luhn(d, (int)nd)) {
            int after = at(s, (int64_t)j);
            if (!(after >= 0 && is_alnum(after)) &&
                !(ng == 1 && (point || (after == '.' && is_digit(at(s, (int64_t)j + 1)) &&
                                        !dot_run(s, (int64_t)j + 1, 1)))))
                best = (int64_t)j;
        }
        if (ng == 5) break;
        int dot = at(s, (int64_t)j) == '.' && is_digit(at(s, (int64_t)j + 1));
        int w = dot ? 1 : dash_sep(s, (int64_t)j);
        if (!w && at(s, (int64_t)j) == ' ' && is_digit(at(s, (int64_t)j + 1))) w = 1;
        if (!w || (dotted >= 0 && dot != dotted)) break;
        dotted = dot;
        j += (size_t)w;
    }
    if (best < 0) return;
    card_span *floors = room(s->floors, &s->floors_cap, s->nfloors, sizeof *floors, 16);
    if (!floors) {
        s->oom = 1;
        return;
    }
    s->floors = floors;
    s->floors[s->nfloors++] = (card_span){i, (size_t)best};
}

/* ---------------------------------------------------------------------------------- IBAN */
static const struct {
    char cc[3];
    int len;
} IBAN_LENGTHS[] = {
    {"AD", 24}, {"AE", 23}, {"AL", 28}, {"AT", 20}, {"AZ", 28}, {"BA", 20}, {"BE", 16}, {"BG", 22}, {"BH", 22},
    {"BR", 29}, {"CH", 21}, {"CR", 22}, {"CY", 28}, {"CZ", 24}, {"DE", 22}, {"DK", 18}, {"DO", 28}, {"EE", 20},
    {"EG", 29}, {"ES", 24}, {"FI", 18}, {"FO", 18}, {"FR", 27}, {"GB", 22}, {"GE", 22}, {"GI", 23}, {"GL", 18},
    {"GR", 27}, {"GT", 28}, {"HR", 21}, {"HU", 28}, {"IE", 22}, {"IL", 23}, {"IS", 26}, {"IT", 27}, {"JO", 30},
    {"KW", 30}, {"KZ", 20}, {"LB", 28}, {"LI", 21}, {"LT", 20}, {"LU", 20}, {"LV", 21}, {"MC", 27}, {"MD", 24},
    {"ME", 22}, {"MK", 19}, {"MR", 27}, {"MT", 31}, {"MU", 30}, {"NL", 18}, {"NO", 15}, {"PK", 24}, {"PL", 28},
    {"PS", 29}, {"PT", 25}, {"QA", 29}, {"RO", 24}, {"RS", 22}, {"SA", 24}, {"SE", 24}, {"SI", 19}, {"SK", 24},
    {"SM", 27}, {"TN", 24}, {"TR", 26}, {"UA", 29}, {"VG", 24}, {"XK", 20},
};

static int iban_length(const unsigned char *cc) {
    int c0 = is_lower(cc[0]) ? cc[0] - 32 : cc[0], c1 = is_lower(cc[1]) ? cc[1] - 32 : cc[1];
    for (size_t k = 0; k < sizeof IBAN_LENGTHS / sizeof IBAN_LENGTHS[0]; k++)
        if (IBAN_LENGTHS[k].cc[0] == c0 && IBAN_LENGTHS[k].cc[1] == c1) return IBAN_LENGTHS[k].len;
    return 0;
}

static int mod97(const char *iban, int len) {
    int r = 0;
    for (int k = 0; k < len; k++) {
        char ch = iban[(k + 4) % len];
        int v = is_digit(ch) ? ch - '0' : lower_ascii(ch) - 'a' + 10;
        r = v >= 10 ? (r * 100 + v) % 97 : (r * 10 + v) % 97;
    }
    return r;
}

/* An IBAN from i: compact, or in groups of 4 split by single spaces or dashes, mixed or not, or by dots
 * alone (not running on into more dotted letters or digits); see _iban in the reference for the extra
 * rules of lower-case letters. */
static void iban(scan_t *s, size_t i) {
    int prev = at(s, (int64_t)i - 1);
    if (prev >= 0 && is_alnum(prev)) return;
    if (!(is_alpha(s->b[i]) && is_alpha(at(s, i + 1)) && is_digit(at(s, i + 2)) && is_digit(at(s, i + 3)))) return;
    int length = iban_length(s->b + i);
    if (!length) return;
    char compact[40];
    size_t end;
    int sep = at(s, i + 4);
    if (sep == ' ' || sep == '-' || sep == '.') {
        memcpy(compact, s->b + i, 4);
        int count = 4, dash = 0;
        size_t j = i + 4;
        while (count < length) {
            if (sep == '.' ? at(s, j) != '.' : (at(s, j) != ' ' && at(s, j) != '-')) return;
            dash |= at(s, j) == '-';
            size_t g_end = RUN_END(s, j + 1, is_alnum, 5);
            int glen = (int)(g_end - (j + 1));
            if (glen == 0 || glen > 4 || count + glen > length || (glen < 4 && count + glen != length)) return;
            memcpy(compact + count, s->b + j + 1, (size_t)glen);
            count += glen;
            j = g_end;
        }
        end = j;
        if (dash && at(s, (int64_t)end) == '-' && is_alnum(at(s, (int64_t)end + 1))) return;
        if (sep == '.' && at(s, (int64_t)end) == '.' && is_alnum(at(s, (int64_t)end + 1))) return;
    } else {
        end = RUN_END(s, i, is_alnum, length + 1);
        if ((int)(end - i) != length) return;
        memcpy(compact, s->b + i, (size_t)length);
    }
    int after = at(s, (int64_t)end);
    if (after >= 0 && is_alnum(after)) return;
    int lower = 0, bban_digit = 0;
    for (int k = 0; k < length; k++) {
        lower |= is_lower(compact[k]);
        if (k >= 4) bban_digit |= is_digit(compact[k]);
    }
    if (lower && (!bban_digit || (sep != ' ' && sep != '-' && sep != '.' && !window_has(s, i, 40, "iban", "iban")))) return;
    if (mod97(compact, length) == 1) emit(s, i, end, QG_IBAN, QG_V_MOD97);
}

/* --------------------------------------------------------------------------------- email */
static const char *const DB_SCHEMES[] = {
    "postgres", "postgresql", "pgsql", "mysql", "mariadb", "mongodb", "mongodb+srv", "redis",
    "rediss", "amqp", "amqps", "mssql", "sqlserver", "oracle", "cockroachdb", "clickhouse",
    "couchdb", "cassandra", "neo4j", "memcached", NULL,
};

/* The scheme just before "://" at p names a database ("postgresql+asyncpg" reads as "postgresql";
   "mongodb+srv" is its own). */
static int db_scheme(const unsigned char *b, size_t p) {
    size_t sc = p;
    while (sc > 0 && p - sc <= 32 && is_scheme(b[sc - 1])) sc--;
    if (p - sc > 32 || p == sc) return 0;
    size_t slen = p - sc;
    if (!eq_ci(b + sc, slen, "mongodb+srv")) {
        const unsigned char *plus = memchr(b + sc, '+', slen);
        if (plus) slen = (size_t)(plus - (b + sc));
    }
    for (int k = 0; DB_SCHEMES[k]; k++)
        if (eq_ci(b + sc, slen, DB_SCHEMES[k])) return 1;
    return 0;
}

/* An image drawn for a display density (icon@2x.png, hero@3x.webp: Apple's naming, all over web
   pages and their URLs) is no address: no TLD is an image format's extension. Only that shape
   (digits, optionally '.' and digits, and an 'x', then the extension), so alice@example.com.png
   keeps its address. */
static const char *const IMAGE_EXTS[] = {
    "png", "jpg", "jpeg", "gif", "webp", "svg", "avif", "bmp", "tif", "tiff", "heic", "ico", NULL,
};

static int density_image(const unsigned char *d, size_t n, const unsigned char *ext, size_t en) {
    if (n < 2 || lower_ascii(d[n - 1]) != 'x') return 0;
    /* the density: digits, or digits '.' digits (icon@1.5x.png) */
    size_t dot = n;
    for (size_t i = 0; i + 1 < n; i++) {
        if (d[i] == '.' && dot == n && i > 0 && i + 2 < n) dot = i;
        else if (!is_digit(d[i])) return 0;
    }
    for (int k = 0; IMAGE_EXTS[k]; k++)
        if (eq_ci(ext, en, IMAGE_EXTS[k])) return 1;
    return 0;
}

/* File extensions. A name ending in one is a file, not a domain, unless the extension is a TLD too:
   zip and map (of these, the only ones in IANA's list of TLDs, version 2026112100, pinned in
   tests/data/iana-tlds.txt, which a test checks both lists against), so alice@corp.zip may be an
   address and lodash@4.17.21.tgz never is. Filed by first letter: every address's last label is
   looked up, and walking the whole list made a text of ordinary addresses (alice@corp.io) 15%
   slower. */
static const char *const FILE_EXTS[26] = {
    ['a' - 'a'] = "apk", ['c' - 'a'] = "cjs css csv", ['d' - 'a'] = "deb dmg", ['e' - 'a'] = "egg exe",
    ['g' - 'a'] = "gz gem", ['h' - 'a'] = "html htm", ['i' - 'a'] = "iso", ['j' - 'a'] = "js jar json",
    ['m' - 'a'] = "mjs map min msi", ['p' - 'a'] = "pdf", ['r' - 'a'] = "rar rpm", ['t' - 'a'] = "tgz tar txt",
    ['w' - 'a'] = "war whl wasm", ['x' - 'a'] = "xz xml", ['z' - 'a'] = "zip",
};

/* [v, v + n) is, in any case, one of the space-separated lowercase words of ws. */
static int one_of(const unsigned char *v, size_t n, const char *ws) {
    while (*ws) {
        size_t m = 0;
        while (ws[m] && ws[m] != ' ') m++;
        size_t i = 0;
        while (m == n && i < n && lower_ascii(v[i]) == ws[i]) i++;
        if (m == n && i == n) return 1;
        ws += m + (ws[m] == ' ');
    }
    return 0;
}

/* The words of table (FILE_EXTS, DIST_TAGS) filed under the first letter of [v, v + n), or NULL
   for a label that starts with no letter (a digit: version_file reads 4.17.21's labels). */
static const char *filed(const char *const *table, const unsigned char *v, size_t n) {
    unsigned k = n > 0 ? (unsigned)(lower_ascii(v[0]) - 'a') : 26;
    return k < 26 ? table[k] : NULL;
}

static int file_ext(const unsigned char *v, size_t n) {
    if (n > 4) return 0; /* the longest is 4: most TLDs are answered here */
    const char *ws = filed(FILE_EXTS, v, n);
    return ws && one_of(v, n, ws);
}

static int tld_ext(const unsigned char *v, size_t n) { return eq_ci(v, n, "zip") || eq_ci(v, n, "map"); }

static int digits(const unsigned char *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_digit(v[i])) return 0;
    return n > 0;
}

/* Names a release channel takes in place of a version: npm's dist-tags, Homebrew's and the
   browsers' channels, git's default branches (pkg@latest.zip, core@dev.zip, repo@main.zip,
   app@latest.js.map). Filed by first letter, as FILE_EXTS. */
static const char *const DIST_TAGS[26] = {
    ['a' - 'a'] = "alpha", ['b' - 'a'] = "beta", ['c' - 'a'] = "canary", ['d' - 'a'] = "dev",
    ['e' - 'a'] = "edge experimental", ['i' - 'a'] = "insiders", ['l' - 'a'] = "latest lts",
    ['m' - 'a'] = "main master", ['n' - 'a'] = "next nightly", ['p' - 'a'] = "preview", ['r' - 'a'] = "rc",
    ['s' - 'a'] = "stable snapshot",
};

static int dist_tag(const unsigned char *v, size_t n) {
    const char *ws = filed(DIST_TAGS, v, n);
    return ws && one_of(v, n, ws);
}

/* A file named for a package and its version (lodash@4.17.21.tgz, release@v2.zip,
   app@v2.bundle.js, jquery@3.7.1.min.js, pkg@2.tar.gz, pkg@latest.zip) is no address, in a URL
   or not: the domain [d, e) (2+ labels) ends in a file extension and starts with a version: 'v'
   and digits, digits and a label of digits, or digits or a dist-tag and only extensions after
   them. Digits and a name (alice@163.com.csv, a file named for an address at 163.com) keep the
   address, and so does a dist-tag and a name (alice@dev.corp.zip). The addresses this misses are
   at a zip or map domain named so (alice@v2.zip, alice@163.zip, alice@latest.zip) or in a file
   named for one at a domain that starts so (alice@v2.corp.com.csv, alice@1.2.corp.com.csv).
   The caller has checked that the last label is a file extension. Cold, as is ext_file: few
   domains end in one, and inlined into email_span the two moved the scan's hot loops (an A/B
   with no '@' in the text, where neither runs, was 4.7% slower). */
__attribute__((cold, noinline)) static int version_file(const unsigned char *b, size_t d, size_t e) {
    size_t l0 = d; /* the first label is [d, l0) */
    while (b[l0] != '.') l0++;
    if ((b[d] == 'v' || b[d] == 'V') && digits(b + d + 1, l0 - d - 1)) return 1;
    int number = digits(b + d, l0 - d);
    if (!number && !dist_tag(b + d, l0 - d)) return 0;
    size_t l1 = l0 + 1; /* the second label is [l0 + 1, l1) */
    while (l1 < e && b[l1] != '.') l1++;
    if (number && digits(b + l0 + 1, l1 - l0 - 1)) return 1;
    for (size_t a = l0 + 1; a < e;) {
        size_t z = a;
        while (z < e && b[z] != '.') z++;
        if (!file_ext(b + a, z - a)) return 0;
        a = z + 1;
    }
    return 1;
}

/* The domain [d, e) of an address-shaped text is a file's name (builds/agent@nightly.exe,
   notes@draft.txt, archive/main@abc.tgz), anywhere: its last labels are file extensions that
   are no TLD, so it is no domain whole, and what is left once they are taken off is no domain
   either (one label, or a last label that is not 2+ letters). A TLD is never taken off
   (u/alice@corp.zip is an address), and a file named for an address keeps it
   (exports/alice@corp.com.csv, alice@corp.zip.csv). The caller has checked that the last label
   is a file extension. */
__attribute__((cold, noinline)) static int ext_file(const unsigned char *b, size_t d, size_t e) {
    size_t end = e; /* the labels left run from d to end */
    for (;;) {
        size_t dot = end;
        while (dot > d && b[dot - 1] != '.') dot--;
        /* the last label left is [dot, end); dot == d when it is the first */
        if (!file_ext(b + dot, end - dot) || tld_ext(b + dot, end - dot)) break;
        if (dot == d) {
            end = d;
            break;
        }
        end = dot - 1;
    }
    if (end == e) return 0;
    if (end == d) return 1; /* no label left */
    size_t dot = end;
    while (dot > d && b[dot - 1] != '.') dot--;
    if (dot == d) return 1; /* one label left */
    if (end - dot < 2) return 1;
    for (size_t k = dot; k < end; k++)
        if (!is_alpha(b[k])) return 1;
    return 0;
}

static inline int is_host(int c) {
    return is_alnum(c) || c == '.' || c == '-' || c == '_' || c == ':' || c == ',' || c == '[' || c == ']';
}

/* [a, q) is a host list whose every ':' outside brackets follows a host and starts a port, digits
   up to a ',' or the end (db.internal, h1:5432,h2:5433, [::1]:5432), so no password a parser
   could read there is more than a port. */
static int host_list(const unsigned char *b, size_t a, size_t q) {
    /* No ':' at all: after one, libpq and SQLAlchemy read what follows up to the '@' as a
       password (db:5432?x=a@corp.io has the password 5432?x=a), and a password is the worse miss. */
    for (size_t k = a; k < q; k++)
        if (!is_host(b[k]) || b[k] == ':') return 0;
    return 1;
}

/* Whether a database URL's authority text [a, e) holds the start of its query or fragment, before
   an address at e: a '?' or '#' right after the credentials' '@' and a host list
   (u:p@db.example?to=...), or, with no '@' before it, after hosts with no ':' only when the
   address is a parameter's value (db.example?to=...). Any other '?' or '#' is the userinfo's
   (user:pa?ss@host, user:p#w@host, user:1234?x@host). */
static int db_query_in(const unsigned char *b, size_t a, size_t e) {
    int64_t at = -1;
    int host = 0; /* every character since the last '@' is a host's */
    for (size_t q = a; q < e; q++) {
        if (b[q] == '@') {
            at = (int64_t)q;
            host = 1;
        } else if ((b[q] == '?' || b[q] == '#') && at >= 0 && host && (int64_t)q > at + 1) {
            return 1;
        } else if ((b[q] == '?' || b[q] == '#') && at < 0 && q > a && b[e - 1] == '=' && host_list(b, a, q)) {
            return 1;
        } else if (!is_host(b[q])) {
            host = 0;
        }
    }
    return 0;
}

/* The address whose '@' is at p, if there is one: [*ls_out, *de_out). */
static int email_span(scan_t *s, size_t p, size_t *ls_out, size_t *de_out) {
    const unsigned char *b = s->b;
    size_t ls = p;
    while (ls > 0 && p - ls <= 64 && is_local(b[ls - 1])) ls--;
    if (p - ls > 64) return 0;
    while (ls < p && b[ls] == '.') ls++;
    if (ls == p || b[p - 1] == '.') return 0;
    for (size_t k = ls; k + 1 < p; k++)
        if (b[k] == '.' && b[k + 1] == '.') return 0;
    size_t de = RUN_END(s, p + 1, is_domain, 256);
    if (de - (p + 1) > 255) return 0;
    while (de > p + 1 && (b[de - 1] == '.' || b[de - 1] == '-')) de--;
    /* labels: at least two, each 1-63 chars, no leading/trailing '-', TLD letters only, 2+ */
    int nlabels = 0;
    size_t a = p + 1;
    size_t last_a = a, last_e = a;
    for (size_t k = p + 1; k <= de; k++) {
        if (k == de || b[k] == '.') {
            size_t len = k - a;
            if (len == 0 || len > 63 || b[a] == '-' || b[k - 1] == '-') return 0;
            nlabels++;
            last_a = a;
            last_e = k;
            a = k + 1;
        }
    }
    if (nlabels < 2 || last_e - last_a < 2) return 0;
    for (size_t k = last_a; k < last_e; k++)
        if (!is_alpha(b[k])) return 0;
    if (density_image(b + p + 1, last_a - 1 - (p + 1), b + last_a, last_e - last_a)) return 0;
    /* both file rules need a last label that is a file extension: most domains are answered here */
    if (file_ext(b + last_a, last_e - last_a) && (version_file(b, p + 1, de) || ext_file(b, p + 1, de))) return 0;
    size_t k = ls;
    while (k > 0 && ls - k < 256 && is_url_segment(b[k - 1])) k--;
    /* user@host in a URL's authority (scheme://user:pw@host) is not an e-mail address; one past
       the authority (a path, query or fragment: /img.png?who=alice@example.com) is. RFC 3986 ends
       the authority at '/', '?' or '#'. A database URL's password holds '?' and '#' unescaped, so
       its authority ends at '/', or at a '?' or '#' only after the credentials' '@' and a host
       (db_query_in). */
    int64_t at = -1;
    for (int64_t q = find_lit(s, "://", 3, k, ls); q >= 0; q = find_lit(s, "://", 3, (size_t)q + 1, ls)) at = q;
    if (at >= 0) {
        int db = db_scheme(b, (size_t)at), ended = 0;
        for (size_t q = (size_t)at + 3; q < ls && !ended; q++)
            ended = b[q] == '/' || (!db && (b[q] == '?' || b[q] == '#'));
        if (!ended && !(db && db_query_in(b, (size_t)at + 3, ls))) return 0;
    }
    *ls_out = ls;
    *de_out = de;
    return 1;
}

static void email(scan_t *s, size_t p) {
    size_t ls, de;
    if (email_span(s, p, &ls, &de)) emit(s, ls, de, QG_EMAIL, QG_V_FORMAT);
}

/* ------------------------------------------------------------- URLs: databases and Slack */
static const char SLACK_HOOK[] = "://hooks.slack.com/services/";

static void url(scan_t *s, size_t p) {
    const unsigned char *b = s->b;
    if (db_scheme(b, p)) {
        size_t a0 = p + 3;
        size_t a_end = RUN_END(s, a0, is_authority, 257);
        if (a_end - a0 <= 256) {
            /* The userinfo ends at the last '@', or, where an address follows in the query or
               fragment (u:p@db.example?to=alice@example.com), at the last '@' before that
               address, which is then found (a longer password would take it over). */
            size_t first_ls = a_end;
            for (size_t k = a0; k < a_end; k++) {
                size_t ls, de;
                if (b[k] == '@' && email_span(s, k, &ls, &de) && db_query_in(b, a0, ls)) {
                    first_ls = ls;
                    break;
                }
            }
            int64_t at_pos = -1;
            for (size_t k = a0; k < first_ls; k++)
                if (b[k] == '@') at_pos = (int64_t)k;
            if (at_pos > (int64_t)a0 && (size_t)at_pos < a_end - 1) {
                const unsigned char *colon = memchr(b + a0, ':', (size_t)at_pos - a0);
                if (colon) {
                    size_t pw_start = (size_t)(colon - b) + 1, pw_end = (size_t)at_pos;
                    if (pw_end > pw_start && !is_placeholder(b + pw_start, pw_end - pw_start))
                        emit(s, pw_start, pw_end, QG_DATABASE_URL_PASSWORD, QG_V_URL_USERINFO);
                }
            }
        }
    }
    if (p >= 5 && prefix_ci(b + p - 5, 5, "https") && starts_with(s, p, SLACK_HOOK)) {
        size_t j = p + sizeof SLACK_HOOK - 1;
        size_t ps[3], pe[3];
        for (int k = 0; k < 3; k++) {
            size_t e = RUN_END(s, j, is_alnum, 257);
            ps[k] = j;
            pe[k] = e;
            j = e;
            if (k < 2) {
                if (at(s, j) != '/') return;
                j++;
            }
        }
        if (pe[0] > ps[0] && b[ps[0]] == 'T' && pe[1] > ps[1] && b[ps[1]] == 'B' && pe[0] - ps[0] >= 8 &&
            pe[1] - ps[1] >= 8 && pe[2] - ps[2] >= 16 && pe[2] - ps[2] <= 256) {
            int after = at(s, (int64_t)j);
            if (!(after >= 0 && is_word(after)) && !has_example(s, p - 5, j))
                emit(s, p - 5, j, QG_SLACK_TOKEN, QG_V_FORMAT);
        }
    }
}

/* ------------------------------------------------------------------------ prefixed tokens */
/* base64 of a PyPI macaroon's first bytes, which name its location: pypi.org or test.pypi.org. */
static const char *const PYPI_MACAROONS[] = {"AgEIcHlwaS5vcmc", "AgENdGVzdC5weXBpLm9yZw"};
/* Doppler's documented token kinds (docs.doppler.com, "Auth Token Formats"); "st." last: only a
 * service token may name its config before the token (dp.st.dev.<token>). */
static const char *const DOPPLER_KINDS[] = {"ct.", "pt.", "sa.", "said.", "scim.", "audit.", "st.", NULL};
static inline int is_doppler_config(int c) { return is_lower(c) || is_digit(c) || c == '_' || c == '-'; }
static inline int is_upper_digit(int c) { return is_upper(c) || is_digit(c); }
static const char *const AWS_PREFIXES[] = {"AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA", NULL};

static void emit_token(scan_t *s, size_t i, size_t e, int type) {
    if (!has_example(s, i, e)) emit(s, i, e, type, QG_V_FORMAT);
}

static int all_of(const unsigned char *v, size_t n, int (*pred)(int)) {
    for (size_t k = 0; k < n; k++)
        if (!pred(v[k])) return 0;
    return 1;
}

static int all_alnum(const unsigned char *v, size_t n) { return all_of(v, n, is_alnum); }

/* The run of letters and digits at p is exactly n long: lowercase hex with a letter and a digit. */
static int hex_body(const scan_t *s, size_t p, size_t n) {
    if (RUN_END(s, p, is_alnum, n + 1) != p + n) return 0;
    int digit = 0, letter = 0;
    for (size_t q = p; q < p + n; q++) {
        int c = s->b[q];
        if (!is_digit(c) && !(c >= 'a' && c <= 'f')) return 0;
        digit |= is_digit(c);
        letter |= !is_digit(c);
    }
    return digit && letter;
}

static void token(scan_t *s, size_t i) {
    const unsigned char *b = s->b;
    int prev = at(s, (int64_t)i - 1);
    int c = b[i];
    if (c == 'A' && !(prev >= 0 && is_alnum(prev))) {
        for (int k = 0; AWS_PREFIXES[k]; k++) {
            if (starts_with(s, i, AWS_PREFIXES[k])) {
                size_t e = RUN_END(s, i, is_alnum, 21);
                int ok = e - i == 20;
                for (size_t q = i + 4; ok && q < e; q++) ok = is_base32(b[q]);
                if (ok) emit_token(s, i, e, QG_AWS_ACCESS_KEY);
                break;
            }
        }
    }
    /* Tokens may be wrapped in '_' (Markdown emphasis, snake_case glue): '_' before a prefix and
     * after a fixed-length body does not hide them. */
    if (c == 'g' && !(prev >= 0 && is_alnum(prev))) {
        if (i + 4 <= s->n && b[i + 1] == 'h' && b[i + 3] == '_' && in_set(b[i + 2], "pousr")) {
            size_t e = RUN_END(s, i + 4, is_alnum, 37);
            if (e - i == 40) emit_token(s, i, e, QG_GITHUB_TOKEN);
        } else if (starts_with(s, i, "github_pat_") && RUN_END(s, i + 11, is_alnum, 23) == i + 33 &&
                   at(s, (int64_t)i + 33) == '_') {
            size_t e = RUN_END(s, i + 34, is_alnum, 60);
            if (e - i == 93) emit_token(s, i, e, QG_GITHUB_TOKEN);
        }
    }
    if (c == 'g' && !(prev >= 0 && is_alnum_dash(prev)) && starts_with(s, i, "glpat-")) {
        size_t e = RUN_END(s, i, is_word_dash, 257);
        if (e - i - 6 >= 20 && e - i - 6 <= 50) emit_token(s, i, e, QG_GITLAB_TOKEN);
    }
    if (c == 'x' && !(prev >= 0 && is_alnum_dash(prev)) && starts_with(s, i, "xox") && i + 5 <= s->n &&
        in_set(b[i + 3], "baprs") && b[i + 4] == '-') {
        size_t e = RUN_END(s, i, is_alnum_dash, 257);
        int digit = 0;
        for (size_t q = i + 5; q < e; q++) digit |= is_digit(b[q]);
        if (e - i - 5 >= 10 && e - i <= 256 && digit) emit_token(s, i, e, QG_SLACK_TOKEN);
    }
    if ((c == 's' || c == 'r') && !(prev >= 0 && is_alnum(prev)) &&
        (starts_with(s, i, "sk_live_") || starts_with(s, i, "sk_test_") || starts_with(s, i, "rk_live_") ||
         starts_with(s, i, "rk_test_"))) {
        size_t e = RUN_END(s, i + 8, is_alnum, 248);
        size_t rest = e - i - 8;
        if (rest >= 16 && rest <= 247) emit_token(s, i, e, QG_STRIPE_KEY);
    }
    if (c == 's' && !(prev >= 0 && is_alnum_dash(prev)) && starts_with(s, i, "sk-")) {
        size_t e = RUN_END(s, i, is_word_dash, 257);
        size_t rest = e - i - 3;
        int lo, up, dg;
        classes(b + i + 3, rest, &lo, &up, &dg);
        if (rest >= 32 && rest <= 253 && lo && up && dg)
            emit_token(s, i, e, starts_with(s, i, "sk-ant-") ? QG_ANTHROPIC_KEY : QG_OPENAI_KEY);
    }
    /* Bodies that may hold '_' and '-' end where that alphabet ends: no match inside a longer token. */
    int no_alnum_dash = !(prev >= 0 && is_alnum_dash(prev)), no_alnum = !(prev >= 0 && is_alnum(prev));
    if (c == 'A' && no_alnum_dash && starts_with(s, i, "AIza") && RUN_END(s, i + 4, is_word_dash, 36) == i + 39)
        emit_token(s, i, i + 39, QG_GOOGLE_API_KEY);
    if (c == 'G' && no_alnum_dash && starts_with(s, i, "GOCSPX-") && RUN_END(s, i + 7, is_word_dash, 29) == i + 35)
        emit_token(s, i, i + 35, QG_GOOGLE_OAUTH_SECRET);
    if (c == 'n' && no_alnum && starts_with(s, i, "npm_") && RUN_END(s, i + 4, is_alnum, 37) == i + 40) {
        int lo, up, dg;
        classes(b + i + 4, 36, &lo, &up, &dg);
        if (lo && up && dg) emit_token(s, i, i + 40, QG_NPM_TOKEN);
    }
    if (c == 'p' && no_alnum_dash && starts_with(s, i, "pypi-") &&
        (starts_with(s, i + 5, PYPI_MACAROONS[0]) || starts_with(s, i + 5, PYPI_MACAROONS[1]))) {
        size_t e = RUN_END(s, i, is_word_dash, 1025);
        if (e - i >= 70 && e - i <= 1024) emit_token(s, i, e, QG_PYPI_TOKEN);
    }
    if (c == 'S' && no_alnum_dash && prev != '.' && starts_with(s, i, "SG.") &&
        RUN_END(s, i + 3, is_word_dash, 23) == i + 25 && at(s, (int64_t)i + 25) == '.' &&
        RUN_END(s, i + 26, is_word_dash, 44) == i + 69) {
        int a = at(s, (int64_t)i + 70);
        if (!(at(s, (int64_t)i + 69) == '.' && a >= 0 && is_word_dash(a))) emit_token(s, i, i + 69, QG_SENDGRID_KEY);
    }
    if (c == 'S' && no_alnum && i + 2 <= s->n && b[i + 1] == 'K' && RUN_END(s, i + 2, is_alnum, 33) == i + 34) {
        int hex = 1, digit = 0, letter = 0;
        for (size_t q = i + 2; q < i + 34; q++) {
            hex &= is_hex(b[q]);
            digit |= is_digit(b[q]);
            letter |= is_alpha(b[q]);
        }
        if (hex && digit && letter) emit_token(s, i, i + 34, QG_TWILIO_KEY);
    }
    if (c == 'h' && no_alnum && starts_with(s, i, "hf_") && RUN_END(s, i + 3, is_alnum, 35) == i + 37) {
        int upper = 0, lower = 0;
        for (size_t q = i + 3; q < i + 37; q++) {
            upper += is_upper(b[q]);
            lower += is_lower(b[q]);
        }
        /* A camelCase name of 34 letters (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) has a few capitals. */
        if (upper + lower == 34 && upper >= 8 && lower >= 8) emit_token(s, i, i + 37, QG_HUGGINGFACE_TOKEN);
    }
    if (c == 's' && no_alnum && starts_with(s, i, "shp") && at(s, (int64_t)i + 5) == '_' &&
        (starts_with(s, i + 3, "at") || starts_with(s, i + 3, "ca") || starts_with(s, i + 3, "pa") ||
         starts_with(s, i + 3, "ss")) &&
        hex_body(s, i + 6, 32))
        emit_token(s, i, i + 38, QG_SHOPIFY_TOKEN);
    if (c == 'd' && no_alnum && at(s, (int64_t)i + 1) == 'o' && in_set(at(s, (int64_t)i + 2), "por") &&
        starts_with(s, i + 3, "_v1_") && hex_body(s, i + 7, 64))
        emit_token(s, i, i + 71, QG_DIGITALOCEAN_TOKEN);
    /* "key-" is an everyday word: not after a name's '_', '-' or '.', and not before more of a
     * name (key-<md5>-v2, key-<md5>.json). */
    if (c == 'k' && !(prev >= 0 && (is_word_dash(prev) || prev == '.')) && starts_with(s, i, "key-") &&
        hex_body(s, i + 4, 32)) {
        int a = at(s, (int64_t)i + 36), a2 = at(s, (int64_t)i + 37);
        if (!(a >= 0 && is_word_dash(a)) && !(a == '.' && a2 >= 0 && is_word_dash(a2))) emit_token(s, i, i + 36, QG_MAILGUN_KEY);
    }
    if (c == 'd' && no_alnum && starts_with(s, i, "dapi") && hex_body(s, i + 4, 32)) {
        /* A token may carry a "-2" suffix; any other '-' continues a longer name. */
        size_t e = i + 36;
        if (at(s, (int64_t)e) == '-') {
            size_t d = RUN_END(s, e + 1, is_digit, 3);
            int a = at(s, (int64_t)d);
            e = (d > e + 1 && d <= e + 3 && !(a >= 0 && is_alnum_dash(a))) ? d : 0;
        }
        if (e) emit_token(s, i, e, QG_DATABRICKS_TOKEN);
    }
    if (c == 'P' && no_alnum_dash && starts_with(s, i, "PMAK-") && hex_body(s, i + 5, 24) &&
        at(s, (int64_t)i + 29) == '-' && hex_body(s, i + 30, 34) && at(s, (int64_t)i + 64) != '-')
        emit_token(s, i, i + 64, QG_POSTMAN_KEY);
    if (c == 'l' && no_alnum && starts_with(s, i, "lin_api_") && RUN_END(s, i + 8, is_alnum, 41) == i + 48) {
        int lo, up, dg;
        classes(b + i + 8, 40, &lo, &up, &dg);
        if (lo + up + dg >= 2) emit_token(s, i, i + 48, QG_LINEAR_KEY);
    }
    if (c == 'd' && no_alnum_dash && prev != '.' && starts_with(s, i, "dp.")) {
        for (int k = 0; DOPPLER_KINDS[k]; k++) {
            if (!starts_with(s, i + 3, DOPPLER_KINDS[k])) continue;
            size_t p = i + 3 + strlen(DOPPLER_KINDS[k]);
            if (!DOPPLER_KINDS[k + 1]) {
                size_t g = RUN_END(s, p, is_doppler_config, 36);
                if (g - p >= 2 && g - p <= 35 && at(s, (int64_t)g) == '.') p = g + 1;
            }
            size_t e = RUN_END(s, p, is_alnum, 45);
            int a = at(s, (int64_t)e), a2 = at(s, (int64_t)e + 1), lo, up, dg;
            classes(b + p, e - p, &lo, &up, &dg);
            if (e - p >= 40 && e - p <= 44 && lo + up + dg >= 2 && !(a >= 0 && is_word_dash(a)) &&
                !(a == '.' && a2 >= 0 && is_word_dash(a2)))
                emit_token(s, i, e, QG_DOPPLER_TOKEN);
            break;
        }
    }
    /* Slack app-level token: xapp-<digit>-<app id>-<digits>-<64 hex>. */
    if (c == 'x' && no_alnum_dash && starts_with(s, i, "xapp-") && is_digit(at(s, (int64_t)i + 5)) &&
        at(s, (int64_t)i + 6) == '-') {
        size_t p = i + 7, q = RUN_END(s, p, is_upper_digit, 21);
        if (q - p >= 5 && q - p <= 20 && at(s, (int64_t)q) == '-') {
            size_t r = RUN_END(s, q + 1, is_digit, 21);
            if (r - q - 1 >= 5 && r - q - 1 <= 20 && at(s, (int64_t)r) == '-' && hex_body(s, r + 1, 64) &&
                at(s, (int64_t)r + 65) != '-')
                emit_token(s, i, r + 65, QG_SLACK_TOKEN);
        }
    }
    /* An Azure storage connection string's AccountKey: base64 of 64 bytes, so 86 characters, the
     * last of them one of "AQgw" (2 bits of data), then "==". Only the value is the secret. */
    if (c == 'A' && no_alnum && starts_with(s, i, "AccountKey=")) {
        size_t p = i + 11;
        int a = at(s, (int64_t)p + 88), lo, up, dg;
        if (RUN_END(s, p, is_b64, 87) == p + 86 && in_set(b[p + 85], "AQgw") && at(s, (int64_t)p + 86) == '=' &&
            at(s, (int64_t)p + 87) == '=' && !(a >= 0 && (is_b64(a) || a == '='))) {
            classes(b + p, 86, &lo, &up, &dg);
            if (lo && up && dg) emit_token(s, p, p + 88, QG_AZURE_STORAGE_KEY);
        }
    }
}

/* ----------------------------------------------------------------------------------- JWT */
static int b64url_value(int c) {
    if (is_upper(c)) return c - 'A';
    if (is_lower(c)) return c - 'a' + 26;
    if (is_digit(c)) return c - '0' + 52;
    return c == '-' ? 62 : 63; /* '_' */
}

static int jwt_header_ok(const unsigned char *seg, size_t len) {
    unsigned char h[3072 + 3];
    size_t hn = 0;
    uint32_t acc = 0;
    int bits = 0;
    if (len % 4 == 1) return 0;
    for (size_t k = 0; k < len; k++) {
        acc = (acc << 6) | (uint32_t)b64url_value(seg[k]);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            h[hn++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    size_t a = 0, e = hn;
    while (a < e && in_set(h[a], " \t\r\n")) a++;
    while (e > a && in_set(h[e - 1], " \t\r\n")) e--;
    if (e - a < 2 || h[a] != '{' || h[e - 1] != '}') return 0;
    for (size_t k = a; k + 5 <= e; k++) {
        if (memcmp(h + k, "\"alg\"", 5) == 0) {
            size_t q = k + 5;
            while (q < e && in_set(h[q], " \t\r\n")) q++;
            if (q < e && h[q] == ':') return 1;
        }
    }
    return 0;
}

static void jwt(scan_t *s, size_t i) {
    int prev = at(s, (int64_t)i - 1);
    if (prev >= 0 && (is_alnum_dash(prev) || prev == '.')) return; /* '_' may wrap it, as other tokens */
    size_t e1 = RUN_END(s, i, is_word_dash, 4097);
    if (e1 - i > 4096 || at(s, e1) != '.') return;
    size_t e2 = RUN_END(s, e1 + 1, is_word_dash, 65537);
    if (e2 - (e1 + 1) < 2 || e2 - (e1 + 1) > 65536 || at(s, e2) != '.') return;
    size_t e3 = RUN_END(s, e2 + 1, is_word_dash, 4097);
    if (e3 - (e2 + 1) > 4096) return;
    if (!jwt_header_ok(s->b + i, e1 - i) || has_example(s, i, e3)) return;
    emit(s, i, e3, QG_JWT, QG_V_JWT_HEADER);
}

/* ----------------------------------------------------------------------------------- PEM */
static const char PEM_BEGIN[] = "-----BEGIN ";

static void pem(scan_t *s, size_t i) {
    const unsigned char *b = s->b;
    size_t ls = i + sizeof PEM_BEGIN - 1;
    size_t le = RUN_END(s, ls, is_pem_label, 65);
    if (le - ls > 64 || !contains_ci(b, ls, le, "private key") || !starts_with(s, le, "-----")) return;
    /* contains_ci folds case but the label class is upper-case only, so it is exact here */
    size_t h = le + 5;
    int64_t nxt = find_lit(s, PEM_BEGIN, sizeof PEM_BEGIN - 1, h, s->n);
    size_t region_end = nxt < 0 ? s->n : (size_t)nxt;
    char marker[9 + 64 + 5 + 1];
    size_t mlen = 0;
    memcpy(marker, "-----END ", 9);
    mlen = 9;
    memcpy(marker + mlen, b + ls, le - ls);
    mlen += le - ls;
    memcpy(marker + mlen, "-----", 5);
    mlen += 5;
    int64_t q = find_lit(s, marker, mlen, h, region_end);
    if (q >= 0) {
        emit(s, i, (size_t)q + mlen, QG_PRIVATE_KEY, QG_V_PEM_ARMOR);
        return;
    }
    size_t e = RUN_END(s, h, is_pem_body, region_end - h);
    while (e > h && in_set(b[e - 1], "\r\n\t \\")) e--;
    emit(s, i, e, QG_PRIVATE_KEY, QG_V_PEM_BEGIN);
}

/* ---------------------------------------------------------- 40-character AWS secret keys */
static int is_hex_digest(const unsigned char *v, size_t n) {
    return (n == 32 || n == 40 || n == 64) && all_of(v, n, is_hex);
}

static void aws_secret(scan_t *s, size_t i) {
    const unsigned char *b = s->b;
    int prev = at(s, (int64_t)i - 1);
    if (prev >= 0 && (is_b64(prev) || prev == '_' || prev == '-')) return;
    size_t e = RUN_END(s, i, is_b64, 41);
    int after = at(s, (int64_t)e);
    if (e - i != 40 || (after >= 0 && (is_b64(after) || after == '_' || after == '-' || after == '='))) return;
    int lo, up, dg;
    classes(b + i, 40, &lo, &up, &dg);
    if (!(lo && up && dg) || is_hex_digest(b + i, 40) || has_example(s, i, e)) return;
    double h = entropy(b + i, 40);
    if (h >= 3.5 && window_has(s, i, 64, "aws", "secret")) {
        emit(s, i, e, QG_AWS_SECRET_KEY, QG_V_AWS_CONTEXT);
        return;
    }
    if (h >= 4.5 && (memchr(b + i, '+', 40) || memchr(b + i, '/', 40))) emit(s, i, e, QG_AWS_SECRET_KEY, QG_V_ENTROPY45);
}

/* ---------------------------------------------------------- generic name = value secrets */
static const char *const SECRET_WORDS[] = {
    "key", "keys", "secret", "secrets", "token", "tokens", "password", "passwords", "passwd",
    "pwd", "pass", "passphrase", "auth", "credential", "credentials", "apikey", "pw", "passcode",
    "authorization", NULL,
};
static const char *const PASSWORD_WORDS[] = {
    "password", "passwords", "passwd", "pwd", "pass", "passphrase", "pw", "passcode", NULL,
};
static const char *const PASSWORD_SUFFIXES[] = {"password", "passwd", "pwd", "pass", NULL};
static const char *const SECRET_SUFFIXES[] = {
    "secret", "token", "password", "passwd", "pwd", "pass", "apikey", "authkey", "privatekey", "accesskey",
    "secretkey", NULL,
};
/* English words that end in "pass" but name no password. */
static const char *const NOT_PASS[] = {
    "bypass", "compass", "encompass", "surpass", "trespass", "overpass", "underpass", NULL,
};
static const char *const NAME_STOP[] = {
    "url", "uri", "path", "file", "filename", "dir", "name", "id", "ids", "count", "len",
    "length", "size", "type", "header", "field", "env", "var", "prefix", "suffix", "format",
    "fmt", "mode", "ttl", "timeout", "expiry", "expires", "expiration", "endpoint", "method",
    "kind", "policy", "label", "hint", "min", "max", "regex", "pattern", "reset", "limit",
    "version", "algorithm", "alg", "location", "host", "port", "user", "username", "enabled", NULL,
};

/* Last words of a name that name an attribute of a credential, not the credential: _ATTRIBUTE_WORDS
 * of the reference. */
static const char *const ATTRIBUTE_WORDS[] = {
    "provider", "providers", "issuer", "issuers", "audience", "audiences", "scheme", "schemes",
    "realm", "realms", "tenant", "tenants", "domain", "domains", "server", "servers", "service",
    "services", "backend", "backends", "vendor", "vendors", "client", "clients", "strategy",
    "strategies", "protocol", "protocols", "flow", "flows", "factor", "factors", "usage",
    "rotation", "strength", "level", "levels", "status", "statuses", "region", "regions", "zone",
    "zones", "owner", "owners", "source", "sources", "group", "groups", "role", "roles", "scope",
    "scopes", "tier", "tiers", "vault", "vaults", "manager", "managers", "algo", "algos",
    "purpose", "types", "policies", "methods", "modes", "kinds", "names", "labels", "versions",
    "algorithms", "formats", NULL,
};

/* Flags of secret_name; NAME_PASSWORD and NAME_ATTRIBUTE are what a value's checks take. */
#define NAME_SECRET 1
#define NAME_PASSWORD 2
#define NAME_ATTRIBUTE 4
#define VALUE_FLAGS(f) ((f) & (NAME_PASSWORD | NAME_ATTRIBUTE))

static int in_list(const unsigned char *v, size_t n, const char *const *list) {
    for (int k = 0; list[k]; k++)
        if (eq_ci(v, n, list[k])) return 1;
    return 0;
}

static int ends_with_any(const unsigned char *v, size_t n, const char *const *list) {
    for (int k = 0; list[k]; k++) {
        size_t m = strlen(list[k]);
        if (m <= n && eq_ci(v + n - m, m, list[k])) return 1;
    }
    return 0;
}

/* name_components + _secret_name of the reference: words split at _ . - and camelCase.
 * Returns NAME_SECRET for a secret-like name, NAME_PASSWORD for a password-like one and, for a
 * secret-like one, NAME_ATTRIBUTE when its last word is in ATTRIBUTE_WORDS. */
static int secret_name(const unsigned char *name, size_t n) {
    size_t starts[65], ends[65];
    int np = 0;
    size_t cur = 0, cur_len = 0;
    for (size_t k = 0; k < n; k++) {
        int c = name[k];
        if (c == '_' || c == '.' || c == '-') {
            if (cur_len) {
                starts[np] = cur;
                ends[np++] = cur + cur_len;
            }
            cur_len = 0;
            continue;
        }
        int prev = k > 0 ? name[k - 1] : -1;
        int nxt = k + 1 < n ? name[k + 1] : -1;
        if (cur_len && is_upper(c) &&
            (is_lower(prev) || is_digit(prev) || (is_upper(prev) && nxt >= 0 && is_lower(nxt)))) {
            starts[np] = cur;
            ends[np++] = cur + cur_len;
            cur_len = 0;
        }
        if (!cur_len) cur = k;
        cur_len++;
    }
    if (cur_len) {
        starts[np] = cur;
        ends[np++] = cur + cur_len;
    }
    /* _word_core: without trailing digits, then without a trailing "value" (password1, tokenvalue) */
    for (int k = 0; k < np; k++) {
        while (ends[k] > starts[k] && is_digit(name[ends[k] - 1])) ends[k]--;
        if (ends[k] - starts[k] > 5 && eq_ci(name + ends[k] - 5, 5, "value")) ends[k] -= 5;
    }
    if (!np || in_list(name + starts[np - 1], ends[np - 1] - starts[np - 1], NAME_STOP)) return 0;
    int flags = 0;
    for (int k = 0; k < np; k++) {
        const unsigned char *w = name + starts[k];
        size_t wl = ends[k] - starts[k];
        if (in_list(w, wl, NOT_PASS)) continue;
        if (in_list(w, wl, SECRET_WORDS) || ends_with_any(w, wl, SECRET_SUFFIXES)) flags |= NAME_SECRET;
        if (in_list(w, wl, PASSWORD_WORDS) || ends_with_any(w, wl, PASSWORD_SUFFIXES)) flags |= NAME_PASSWORD;
    }
    /* Only a secret name's values are judged: most names need not be looked up. */
    if ((flags & NAME_SECRET) && in_list(name + starts[np - 1], ends[np - 1] - starts[np - 1], ATTRIBUTE_WORDS))
        flags |= NAME_ATTRIBUTE;
    return flags;
}

static int is_uuid(const unsigned char *v, size_t n) {
    static const int shape[] = {8, 4, 4, 4, 12};
    if (n != 36) return 0;
    size_t k = 0;
    for (int g = 0; g < 5; g++) {
        for (int q = 0; q < shape[g]; q++, k++)
            if (!is_hex(v[k])) return 0;
        if (g < 4) {
            if (v[k] != '-') return 0;
            k++;
        }
    }
    return 1;
}

/* _is_attr_path of the reference: module.attr / self.x.y, the first name lower-case, 3+ long. */
static int is_attr_path(const unsigned char *v, size_t n) {
    size_t k = 0, segs = 0;
    while (k < n && (is_lower(v[k]) || is_digit(v[k]) || v[k] == '_')) k++;
    if (k < 3 || k == n || v[k] != '.') return 0;
    for (size_t a = 0; a <= n; a++) {
        if (a == n || v[a] == '.') {
            segs++;
            continue;
        }
        if ((a == 0 || v[a - 1] == '.') && is_digit(v[a])) return 0;
    }
    if (v[n - 1] == '.') return 0;
    for (size_t a = 1; a < n; a++)
        if (v[a] == '.' && v[a - 1] == '.') return 0;
    return segs >= 2;
}

static inline int is_ident_sep(int c) { return c == '-' || c == '_' || c == '.' || c == ':' || c == '/'; }

/* _identifier_like of the reference: alphanumeric runs joined by single - _ . : /, changing between
 * lower case, upper case and digits at most 4 times. */
static int identifier_like(const unsigned char *v, size_t n) {
    if (n == 0 || is_ident_sep(v[0]) || is_ident_sep(v[n - 1])) return 0;
    int changes = 0;
    for (size_t k = 0; k < n; k++) {
        int a = v[k];
        if (!is_alnum(a) && !is_ident_sep(a)) return 0;
        if (k + 1 == n) break;
        int c = v[k + 1];
        if (is_ident_sep(a)) {
            if (is_ident_sep(c)) return 0;
        } else if ((is_lower(a) && (is_upper(c) || is_digit(c))) || (is_upper(a) && is_digit(c)) ||
                   (is_digit(a) && is_alpha(c))) {
            changes++;
        }
    }
    return changes <= 4;
}

/* Returns the accepting validator or -1; see _generic_value in the reference (flags: VALUE_FLAGS of
 * the name). */
static int generic_value(const unsigned char *v, size_t n, int quoted, int flags) {
    int password = flags & NAME_PASSWORD;
    if (n < (password ? 8u : 16u) || n > 256 || memchr(v, ' ', n) || memchr(v, '\t', n)) return -1;
    if (is_placeholder(v, n) || contains_ci(v, 0, n, "://") || v[0] == '/' || v[0] == '~') return -1;
    if (prefix_ci(v, n, "./") || prefix_ci(v, n, "../")) return -1;
    if (is_uuid(v, n) || is_hex_digest(v, n)) return -1;
    int lo, up, dg, sym = 0, ident = 1;
    classes(v, n, &lo, &up, &dg);
    for (size_t k = 0; k < n; k++) {
        if (!is_alnum(v[k]) && v[k] != '_' && v[k] != '-' && v[k] != '.') sym = 1;
        if (!is_word(v[k]) && v[k] != '.') ident = 0;
    }
    if (!quoted && ident && (!dg || is_attr_path(v, n))) return -1;
    if ((flags & NAME_ATTRIBUTE) && identifier_like(v, n)) return -1;
    int kinds = lo + up + dg + sym;
    if (n >= 16 && kinds >= 2 && entropy(v, n) >= 3.5) return QG_V_ENTROPY35;
    if (password && kinds >= 3) return QG_V_PASSWORD_CHARSET;
    return -1;
}

/* HTTP authorization schemes: "Authorization: Bearer <token>" assigns the token, not the scheme.
 * Returns where the value starts when a scheme word and its spaces begin it at v. */
static size_t scheme_skip(const scan_t *s, size_t v) {
    static const char *const SCHEMES[] = {"bearer", "basic", "token", NULL};
    for (int k = 0; SCHEMES[k]; k++) {
        size_t m = strlen(SCHEMES[k]);
        if (v + m > s->n || !eq_ci(s->b + v, m, SCHEMES[k]) || at(s, (int64_t)(v + m)) != ' ') continue;
        size_t e = v + m;
        while (at(s, (int64_t)e) == ' ') e++;
        int c = at(s, (int64_t)e);
        return (c < 0 || c == '\t' || c == '\r' || c == '\n') ? v : e;
    }
    return v;
}

static void assigned(scan_t *s, size_t v, int flags);

static void generic(scan_t *s, size_t p) {
    const unsigned char *b = s->b;
    int sep = b[p];
    int nxt = at(s, (int64_t)p + 1);
    int prev = at(s, (int64_t)p - 1);
    size_t v = p + 1;
    if (sep == '=') {
        if (nxt == '=' || prev < 0 || in_set(prev, "=!<>:")) return;
        if (nxt == '>') v++;
    } else {
        if (nxt == ':' || prev == ':' || nxt == '/') return;
        if (nxt == '=') v++;
    }
    size_t k = p;
    while (k > 0 && (b[k - 1] == ' ' || b[k - 1] == '\t')) k--;
    if (k > 0 && (b[k - 1] == '"' || b[k - 1] == '\'')) k--;
    size_t ne = k;
    while (k > 0 && ne - k <= 64 && is_name(b[k - 1])) k--;
    if (ne - k > 64 || ne == k) return;
    int letter = 0;
    for (size_t q = k; q < ne; q++) letter |= is_alpha(b[q]);
    int name_flags = secret_name(b + k, ne - k);
    if (!(name_flags & NAME_SECRET) || !letter) return;
    assigned(s, v, VALUE_FLAGS(name_flags));
}

static inline int is_space(int c) { return c == ' '; }

/* _line_indent of the reference: indentation of the line holding v, or -1 when its start is not
 * within 256 printable ASCII characters before v. */
static int64_t line_indent(const scan_t *s, size_t v) {
    size_t k = v;
    while (k > 0 && v - k < 256 && is_value(s->b[k - 1])) k--;
    if (k > 0 && s->b[k - 1] != '\n') return -1;
    return (int64_t)(RUN_END(s, k, is_space, v - k) - k);
}

/* _block_scalar of the reference: a YAML block scalar at v ('|' or '>', optional indicators, end of
 * line). Returns 0 when it is not one; else 1, having emitted the finding of its first line if any. */
static int block_scalar(scan_t *s, size_t v, int flags) {
    size_t j = v + 1;
    for (int r = 0; r < 2; r++) {
        int c = at(s, (int64_t)j);
        if (c == '+' || c == '-' || (c >= '1' && c <= '9')) j++;
    }
    while (at(s, (int64_t)j) == ' ' || at(s, (int64_t)j) == '\t') j++;
    if (at(s, (int64_t)j) == '\r') j++;
    if (at(s, (int64_t)j) != '\n') return 0;
    int64_t indent = line_indent(s, v);
    j++;
    size_t vs = RUN_END(s, j, is_space, 257);
    if (indent < 0 || (int64_t)(vs - j) <= indent) return 1;
    size_t e = RUN_END(s, vs, is_value, 257);
    int after = at(s, (int64_t)e);
    if (e - vs > 256 || !(after < 0 || after == '\r' || after == '\n')) return 1;
    int validator = generic_value(s->b + vs, e - vs, 0, flags);
    if (validator >= 0) emit(s, vs, e, QG_GENERIC_SECRET, validator);
    return 1;
}

/* _next_param of the reference: where a bare value b[v:e] ends when a query-string or form
 * parameter ('&' or "&amp;", a name and '=') follows it; else e. */
static size_t next_param(const scan_t *s, size_t v, size_t e) {
    for (size_t j = v; j < e; j++) {
        if (s->b[j] != '&') continue;
        size_t k = starts_with(s, j + 1, "amp;") ? j + 5 : j + 1;
        size_t ne = RUN_END(s, k, is_name, 65);
        if (ne > k && ne <= k + 64 && at(s, (int64_t)ne) == '=') return j;
    }
    return e;
}

/* _assigned of the reference: the GENERIC_SECRET finding for the value assigned from v. */
static void assigned(scan_t *s, size_t v, int flags) {
    const unsigned char *b = s->b;
    size_t n = s->n;
    while (v < n && (b[v] == ' ' || b[v] == '\t')) v++;
    int q = at(s, (int64_t)v);
    size_t start, end;
    int quoted;
    if ((q == '|' || q == '>') && block_scalar(s, v, flags)) return;
    if (q == '"' || q == '\'' || q == '`') {
        size_t lim = v + 1 + 513 > n ? n : v + 1 + 513;
        size_t e = v + 1;
        /* A backslash takes the next character with it: \" inside "..." does not end the value. */
        while (e < lim && is_value(b[e]) && b[e] != q) e += (b[e] == '\\' && e + 1 < lim && is_value(b[e + 1])) ? 2 : 1;
        if (at(s, (int64_t)e) != q) return;
        start = scheme_skip(s, v + 1);
        if (start > e) start = e;
        end = e;
        quoted = 1;
    } else {
        v = scheme_skip(s, v);
        size_t e = next_param(s, v, RUN_END(s, v, is_bare, 257));
        if (e - v > 256 || at(s, (int64_t)e) == '(') return;
        start = v;
        end = e;
        quoted = 0;
    }
    int validator = generic_value(b + start, end - start, quoted, flags);
    if (validator >= 0) emit(s, start, end, QG_GENERIC_SECRET, validator);
}

/* _secret_field of the reference: secret_name of a name that needs a letter. */
static int secret_field(const unsigned char *name, size_t n) {
    int letter = 0;
    for (size_t q = 0; q < n; q++) letter |= is_alpha(name[q]);
    return letter ? secret_name(name, n) : 0;
}

static inline int is_tag_value(int c) { return is_value(c) && c != '<'; }

static const char CDATA[] = "<![CDATA[";

static inline int is_attrs(int c) { return is_value(c) && c != '<' && c != '>'; }

/* _attr_secret of the reference: secret_field of the name in the first key="..."/name="..."
 * attribute of the tag text b[a:e]; 0 without one. */
static int attr_secret(const scan_t *s, size_t a, size_t e) {
    static const char *const WORDS[] = {"key", "name", NULL};
    for (size_t q = a; q < e; q++) {
        if (s->b[q] != ' ') continue;
        for (int w = 0; WORDS[w]; w++) {
            size_t we = q + 1 + strlen(WORDS[w]);
            int quote = at(s, (int64_t)we + 1);
            if (!starts_with(s, q + 1, WORDS[w]) || at(s, (int64_t)we) != '=' || (quote != '"' && quote != '\''))
                continue;
            size_t ve = RUN_END(s, we + 2, is_name, 65);
            if (ve > we + 2 && ve <= we + 66 && at(s, (int64_t)ve) == quote) return secret_field(s->b + we + 2, ve - (we + 2));
        }
    }
    return 0;
}

/* _PROSE_WORDS of the reference, with PLACEHOLDER_WORDS. */
static const char *const PROSE_WORDS[] = {
    "a", "an", "the", "this", "that", "these", "those", "it", "its", "you", "your", "me", "my", "we",
    "our", "they", "their", "he", "his", "she", "her", "here", "there", "where", "when", "what",
    "which", "who", "how", "why", "is", "are", "was", "were", "be", "been", "am", "do", "does",
    "did", "has", "have", "had", "will", "would", "can", "could", "should", "must", "may",
    "might", "to", "of", "in", "on", "at", "by", "for", "from", "with", "without", "into", "over",
    "under", "about", "as", "via", "per", "than", "then", "and", "or", "but", "not", "no", "if",
    "else", "so", "all", "any", "each", "every", "some", "see", "use", "used", "using", "enter",
    "insert", "put", "type", "set", "unset", "change", "replace", "ask", "same", "get", "please",
    "note", "value", "required", "optional", "unknown", "hidden", "passwords", "passphrase",
    "secrets", "key", "keys", "api", "credential", "credentials", "e.g", "i.e", "etc", NULL,
};

static const char WORD_PUNCT[] = "\"'`()[]{},.;:!?"; /* _WORD_PUNCT of the reference */

static inline int is_key_char(int c) { return is_alnum(c) || (c > 0 && strchr("+/=_-.", c)); }

/* _spaced_value of the reference: an element's value with spaces in it; validator or -1. */
static int spaced_value(const unsigned char *v, size_t n, int flags) {
    if (is_placeholder(v, n)) return -1;
    size_t words = 0, w = 0;
    int empty = 0, prose = 0, mixed = 0;
    for (size_t k = 0; k <= n; k++) {
        if (k < n && v[k] != ' ') continue;
        size_t a = w, e = k; /* the word without the punctuation around it */
        while (a < e && strchr(WORD_PUNCT, v[a])) a++;
        while (e > a && strchr(WORD_PUNCT, v[e - 1])) e--;
        int key_chars = 1, digit = 0;
        for (size_t q = a; q < e; q++) {
            key_chars &= is_key_char(v[q]);
            digit |= is_digit(v[q]);
        }
        if (key_chars && digit) {
            int validator = generic_value(v + a, e - a, 0, flags & NAME_ATTRIBUTE);
            if (validator >= 0) return validator;
        }
        if (in_list(v + a, e - a, PROSE_WORDS) || in_list(v + a, e - a, PLACEHOLDER_WORDS)) prose = 1;
        int lo, up, dg, sym = 0;
        classes(v + w, k - w, &lo, &up, &dg);
        for (size_t q = w; q < k; q++) sym |= !is_alnum(v[q]);
        if (dg && lo + up + dg + sym >= 3) mixed = 1;
        empty |= k == w;
        words++;
        w = k + 1;
    }
    if (!(flags & NAME_PASSWORD) || (flags & NAME_ATTRIBUTE) || n < 12 || words < 2 || words > 8 || empty || prose) return -1;
    int lower_only = 1;
    for (size_t k = 0; k < n; k++)
        if (!is_lower(v[k]) && v[k] != ' ') lower_only = 0;
    if (words >= 3 && lower_only) return QG_V_PASSPHRASE;
    return mixed ? QG_V_PASSPHRASE : -1;
}

/* <password>value</password> or <entry key="db.password">value</entry>: see _xml_element in the
 * reference (b[p] is '<'). */
static void xml_element(scan_t *s, size_t p) {
    const unsigned char *b = s->b;
    size_t k = p + 1, e = RUN_END(s, k, is_name, 65);
    if (e == k || e - k > 64) return;
    size_t nl = e - k;
    int flags = secret_field(b + k, nl);
    if (at(s, (int64_t)e) == ' ') {
        size_t te = RUN_END(s, e, is_attrs, 257);
        if (te - e > 256 || at(s, (int64_t)te) != '>' || b[te - 1] == '/') return;
        if (!(flags & NAME_SECRET)) flags = attr_secret(s, e, te);
        e = te;
    } else if (at(s, (int64_t)e) != '>') {
        return;
    }
    if (!(flags & NAME_SECRET)) return;
    size_t v = e + 1, ve, tail;
    if (starts_with(s, v, CDATA)) { /* <password><![CDATA[value]]></password> */
        v += sizeof CDATA - 1;
        int64_t q = find_lit(s, "]]>", 3, v, RUN_END(s, v, is_value, 259));
        if (q < 0 || (size_t)q - v > 256) return;
        ve = (size_t)q;
        tail = ve + 3;
    } else {
        ve = RUN_END(s, v, is_tag_value, 257);
        if (ve - v > 256) return;
        tail = ve;
    }
    if (tail + 2 + nl >= s->n || b[tail] != '<' || b[tail + 1] != '/' || memcmp(b + tail + 2, b + k, nl) != 0 ||
        b[tail + 2 + nl] != '>')
        return;
    while (v < ve && b[v] == ' ') v++;
    while (ve > v && b[ve - 1] == ' ') ve--;
    int validator = memchr(b + v, ' ', ve - v) ? spaced_value(b + v, ve - v, VALUE_FLAGS(flags))
                                               : generic_value(b + v, ve - v, 0, VALUE_FLAGS(flags));
    if (validator >= 0) emit(s, v, ve, QG_GENERIC_SECRET, validator);
}

#define PAIR_WINDOW 200 /* how far past the name a pair's value field may start */

/* _field_sep of the reference: after a field word at j, where its value starts, or -1. */
static int64_t field_sep(const scan_t *s, size_t j) {
    if (at(s, (int64_t)j) == '"' || at(s, (int64_t)j) == '\'') j++;
    while (at(s, (int64_t)j) == ' ' || at(s, (int64_t)j) == '\t') j++;
    int c = at(s, (int64_t)j);
    return (c == ':' || c == '=') ? (int64_t)j + 1 : -1;
}

/* name: DB_PASSWORD / key="ApiKey" followed by a value field: see _pair in the reference. */
static void pair(scan_t *s, size_t p) {
    const unsigned char *b = s->b;
    size_t n = s->n, e, ps = p; /* b[ps:p]: the camelCase prefix of ParameterKey / ParameterValue */
    int prev = at(s, (int64_t)p - 1);
    if (prev >= 0 && is_name(prev)) {
        if ((b[p] != 'K' && b[p] != 'N') || !is_lower(prev)) return;
        ps = p - 1;
        while (ps > 0 && p - ps < 64 && is_alnum(b[ps - 1])) ps--;
        int pp = at(s, (int64_t)ps - 1);
        if ((pp >= 0 && is_name(pp)) || !is_alpha(b[ps])) return;
    }
    size_t pl = p - ps;
    int after;
    if (prefix_ci(b + p, n - p, "name") && ((after = at(s, (int64_t)p + 4)) < 0 || !is_name(after))) e = p + 4;
    else if (prefix_ci(b + p, n - p, "key") && ((after = at(s, (int64_t)p + 3)) < 0 || !is_name(after))) e = p + 3;
    else return;
    int64_t js = field_sep(s, e);
    if (js < 0) return;
    size_t j = (size_t)js;
    while (at(s, (int64_t)j) == ' ' || at(s, (int64_t)j) == '\t') j++;
    int q = at(s, (int64_t)j);
    int quoted = q == '"' || q == '\'';
    if (quoted) j++;
    size_t ne = RUN_END(s, j, is_name, 65);
    if (ne == j || ne - j > 64 || (quoted && at(s, (int64_t)ne) != q)) return;
    if (pl && memchr(b + j, '.', ne - j)) return; /* RegEnumKey = win32api.RegEnumKey: code */
    int flags = secret_field(b + j, ne - j);
    if (!(flags & NAME_SECRET)) return;
    size_t lim = ne + PAIR_WINDOW > n ? n : ne + PAIR_WINDOW;
    int line_start = 0;
    for (size_t k = ne; k < lim; k++) {
        int c = b[k];
        if (c >= 0x7f || in_set(c, "{}[]<>") || (c == '-' && line_start)) return;
        if (c == '\n') line_start = 1;
        else if (c != ' ' && c != '\t' && c != '\r') line_start = 0;
        size_t w = pl ? pl + 5 : 5;
        int hit = pl ? k + w <= n && memcmp(b + k, b + ps, pl) == 0 && memcmp(b + k + pl, "Value", 5) == 0
                     : (c == 'v' || c == 'V') && prefix_ci(b + k, n - k, "value");
        if (hit && !is_name(b[k - 1])) {
            int a = at(s, (int64_t)k + (int64_t)w);
            if (a >= 0 && is_name(a)) continue;
            int64_t v = field_sep(s, k + w);
            if (v >= 0) {
                assigned(s, (size_t)v, VALUE_FLAGS(flags));
                return;
            }
        }
    }
}

/* _user_flag_before of the reference: a -u/--user flag before p on its line (200 characters). */
static int user_flag_before(const scan_t *s, size_t p) {
    const unsigned char *b = s->b;
    size_t k = p;
    while (k > 0 && p - k < 200 && is_value(b[k - 1])) k--;
    for (size_t q = k; q + 2 < p; q++) {
        if (b[q] != '-' || b[q + 1] != 'u' || !(b[q + 2] == ' ' || is_alnum(b[q + 2]))) continue;
        if (at(s, (int64_t)q - 1) == ' ' || (at(s, (int64_t)q - 1) == '-' && at(s, (int64_t)q - 2) == ' ')) return 1;
    }
    return 0;
}

/* _sshpass_before of the reference: "sshpass" then only spaces and -v flags before p (200). */
static int sshpass_before(const scan_t *s, size_t p) {
    const unsigned char *b = s->b;
    size_t k = p;
    while (p - k <= 200) {
        while (k > 0 && b[k - 1] == ' ') k--;
        if (k >= 3 && b[k - 3] == ' ' && b[k - 2] == '-' && b[k - 1] == 'v') {
            k -= 2;
            continue;
        }
        break;
    }
    if (k < 7 || memcmp(b + k - 7, "sshpass", 7) != 0) return 0;
    int c = at(s, (int64_t)k - 8);
    return c < 0 || !is_name(c);
}

/* mysql -u root -pVALUE, sshpass -p VALUE: see _short_password_flag in the reference (b[p] is '-'). */
static void short_password_flag(scan_t *s, size_t p) {
    int a = at(s, (int64_t)p + 2);
    if (at(s, (int64_t)p - 1) != ' ') return;
    if (sshpass_before(s, p)) {
        assigned(s, p + 2, NAME_PASSWORD);
        return;
    }
    if (a < 0 || a == ' ' || a == '-' || !user_flag_before(s, p)) return;
    size_t before = s->out->len;
    assigned(s, p + 2, NAME_PASSWORD);
    if (s->out->len > before) {
        qg_finding *f = &s->out->items[s->out->len - 1];
        if (memchr(s->b + f->start, '/', (size_t)(f->end - f->start))) s->out->len--;
    }
}

static inline int is_user(int c) { return is_name(c) || c == '@'; }

/* curl -u user:VALUE from j: see _user_password in the reference. */
static void user_password(scan_t *s, size_t j) {
    if (at(s, (int64_t)j) == '"' || at(s, (int64_t)j) == '\'') j++;
    size_t ue = RUN_END(s, j, is_user, 65);
    int a = at(s, (int64_t)ue + 1);
    if (ue == j || ue - j > 64 || at(s, (int64_t)ue) != ':' || a < 0 || a == ' ' || a == '\t' || a == ':') return;
    assigned(s, ue + 1, NAME_PASSWORD);
}

/* redis-cli -h host -p 6379 -a VALUE: see _redis_password_flag in the reference (b[p] is '-'). */
static void redis_password_flag(scan_t *s, size_t p) {
    const unsigned char *b = s->b;
    if (at(s, (int64_t)p - 1) != ' ' || at(s, (int64_t)p + 2) != ' ') return;
    size_t k = p;
    while (k > 0 && p - k < 200 && is_value(b[k - 1]) && !strchr("|;&<>`()", b[k - 1])) k--;
    for (size_t c = k; c + 9 <= p; c++) {
        if (b[c] != 'r' || memcmp(b + c, "redis-cli", 9) != 0) continue;
        int before = at(s, (int64_t)c - 1);
        if ((before < 0 || !is_name(before)) && at(s, (int64_t)c + 9) == ' ') {
            assigned(s, p + 2, NAME_PASSWORD);
            return;
        }
    }
}

/* --password VALUE: a command-line flag named like a secret (b[p] is '-'); -pVALUE; -u user:VALUE;
 * redis-cli -a VALUE. */
static void flag(scan_t *s, size_t p) {
    int prev = at(s, (int64_t)p - 1);
    if (at(s, (int64_t)p + 1) == 'p') {
        short_password_flag(s, p);
        return;
    }
    if (at(s, (int64_t)p + 1) == 'a') {
        redis_password_flag(s, p);
        return;
    }
    if (at(s, (int64_t)p + 1) == 'u') {
        if (prev != ' ') return;
        size_t j = p + 2;
        while (at(s, (int64_t)j) == ' ') j++;
        user_password(s, j);
        return;
    }
    if (at(s, (int64_t)p + 1) != '-' || (prev >= 0 && is_name(prev))) return;
    size_t k = p + 2, e = RUN_END(s, k, is_name, 65);
    if (e - k == 4 && memcmp(s->b + k, "user", 4) == 0 && (at(s, (int64_t)e) == ' ' || at(s, (int64_t)e) == '=')) {
        size_t j = e + 1;
        while (at(s, (int64_t)j) == ' ') j++;
        user_password(s, j);
        return;
    }
    if (e == k || e - k > 64 || at(s, (int64_t)e) != ' ') return;
    int flags = secret_field(s->b + k, e - k);
    if (!(flags & NAME_SECRET)) return;
    size_t v = e;
    while (at(s, (int64_t)v) == ' ') v++;
    if (at(s, (int64_t)v) == '-') return;
    assigned(s, v, VALUE_FLAGS(flags));
}

/* ENV NAME value, Dockerfile's legacy form: see _docker_env in the reference (b[p] is 'E' or 'e'). */
static void docker_env(scan_t *s, size_t p) {
    const unsigned char *b = s->b;
    int c = at(s, (int64_t)p + 3);
    if ((c != ' ' && c != '\t') || !eq_ci(b + p, 3, "env")) return;
    size_t k = p;
    while (k > 0 && (b[k - 1] == ' ' || b[k - 1] == '\t')) k--;
    if (k > 0 && b[k - 1] != '\n') return;
    size_t j = p + 3;
    while (at(s, (int64_t)j) == ' ' || at(s, (int64_t)j) == '\t') j++;
    size_t ne = RUN_END(s, j, is_name, 65);
    c = at(s, (int64_t)ne);
    if (ne == j || ne - j > 64 || (c != ' ' && c != '\t')) return;
    int flags = secret_field(b + j, ne - j);
    if (!(flags & NAME_SECRET)) return;
    size_t v = ne;
    while (at(s, (int64_t)v) == ' ' || at(s, (int64_t)v) == '\t') v++;
    size_t e = RUN_END(s, v, is_value, 257);
    c = at(s, (int64_t)e);
    if (e - v > 256 || !(c < 0 || c == '\r' || c == '\n')) return;
    while (e > v && b[e - 1] == ' ') e--;
    int quoted = e - v >= 2 && (b[v] == '"' || b[v] == '\'') && b[e - 1] == b[v];
    if (quoted) v++, e--;
    int validator = generic_value(b + v, e - v, quoted, VALUE_FLAGS(flags));
    if (validator >= 0) emit(s, v, e, QG_GENERIC_SECRET, validator);
}

/* --------------------------------------------------------------------- overlap resolution */
static int cmp_start_end(const void *x, const void *y) {
    const qg_finding *a = x, *b = y;
    if (a->start != b->start) return a->start < b->start ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    if (a->type != b->type) return a->type < b->type ? -1 : 1;
    return (a->validator > b->validator) - (a->validator < b->validator);
}

static int cmp_end(const void *x, const void *y) {
    const qg_finding *a = x, *b = y;
    return (a->end > b->end) - (a->end < b->end);
}

/* The reference's priority: longer first, then stronger type, then earlier, then validator. */
static int cmp_priority(const void *x, const void *y) {
    const qg_finding *a = x, *b = y;
    int64_t la = a->end - a->start, lb = b->end - b->start;
    if (la != lb) return la > lb ? -1 : 1;
    if (a->type != b->type) return a->type < b->type ? -1 : 1;
    if (a->start != b->start) return a->start < b->start ? -1 : 1;
    return (a->validator > b->validator) - (a->validator < b->validator);
}

/* Byte offsets -> code-point offsets: count the bytes that are not UTF-8 continuation bytes. */
static void to_code_points(const unsigned char *b, qg_findings *f) {
    size_t pos = 0;
    int64_t cp = 0;
    if (f->len == 0) return; /* items may be NULL, and qsort(NULL, 0, ...) is undefined */
    qsort(f->items, f->len, sizeof *f->items, cmp_start_end);
    for (size_t k = 0; k < f->len; k++) {
        size_t target = (size_t)f->items[k].start;
        for (; pos < target; pos++) cp += (b[pos] & 0xC0) != 0x80;
        f->items[k].start = cp;
    }
    pos = 0;
    cp = 0;
    qsort(f->items, f->len, sizeof *f->items, cmp_end);
    for (size_t k = 0; k < f->len; k++) {
        size_t target = (size_t)f->items[k].end;
        for (; pos < target; pos++) cp += (b[pos] & 0xC0) != 0x80;
        f->items[k].end = cp;
    }
}

typedef struct {
    qg_finding f;
    size_t rank; /* position in the cluster's (start, end) order */
} ranked_finding;

#define RESOLVE_PAIRWISE_MAX 32 /* larger clusters take resolve_large */

static int cmp_ranked_priority(const void *x, const void *y) {
    return cmp_priority(&((const ranked_finding *)x)->f, &((const ranked_finding *)y)->f);
}

/* The pairwise check of resolve is quadratic in a cluster's size, and one input can chain every
 * candidate into a single cluster ("@a.io%" repeated: each address's domain starts the next one's
 * local part). Taken candidates are disjoint, so of those starting before c.end only the last one
 * can reach past c.start; a Fenwick tree of prefix maxima over the (start, end) order finds it.
 * cl[0:m] is sorted by (start, end); the taken ones are written from dst. Returns how many. */
static int64_t resolve_large(qg_finding *cl, size_t m, qg_finding *dst) {
    ranked_finding *order = malloc(m * sizeof *order);
    int64_t *starts = malloc(m * sizeof *starts), *ends = malloc(m * sizeof *ends);
    size_t *tree = calloc(m + 1, sizeof *tree), taken = 0;
    if (!order || !starts || !ends || !tree) {
        free(order), free(starts), free(ends), free(tree);
        return -1;
    }
    for (size_t q = 0; q < m; q++) {
        order[q] = (ranked_finding){cl[q], q};
        starts[q] = cl[q].start;
        ends[q] = cl[q].end;
    }
    qsort(order, m, sizeof *order, cmp_ranked_priority);
    for (size_t q = 0; q < m; q++) {
        qg_finding c = order[q].f;
        size_t lo = 0, hi = m; /* how many candidates start before c.end */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (starts[mid] < c.end) lo = mid + 1;
            else hi = mid;
        }
        size_t last = 0; /* 1 + rank of the last taken candidate starting before c.end, or 0 */
        for (size_t i = lo; i > 0; i -= i & (0 - i))
            if (tree[i] > last) last = tree[i];
        if (last && ends[last - 1] > c.start) continue;
        for (size_t i = order[q].rank + 1; i <= m; i += i & (0 - i))
            if (tree[i] < order[q].rank + 1) tree[i] = order[q].rank + 1;
        dst[taken++] = c; /* dst never passes the cluster's own slots, which order has copied */
    }
    free(order), free(starts), free(ends), free(tree);
    return (int64_t)taken;
}

/* Greedy selection, run per cluster of transitively overlapping candidates: candidates in
 * different clusters cannot overlap, so this equals the reference's global greedy pass. */
static int resolve(qg_findings *f) {
    size_t n = f->len, out = 0, k = 0;
    if (n == 0) return 0; /* items may be NULL, and qsort(NULL, 0, ...) is undefined */
    qsort(f->items, n, sizeof *f->items, cmp_start_end);
    while (k < n) {
        size_t c_end = k + 1;
        int64_t reach = f->items[k].end;
        while (c_end < n && f->items[c_end].start < reach) {
            if (f->items[c_end].end > reach) reach = f->items[c_end].end;
            c_end++;
        }
        if (c_end - k > RESOLVE_PAIRWISE_MAX) {
            int64_t taken = resolve_large(f->items + k, c_end - k, f->items + out);
            if (taken < 0) return -1;
            out += (size_t)taken;
            k = c_end;
            continue;
        }
        size_t taken_from = out;
        if (c_end - k > 1) qsort(f->items + k, c_end - k, sizeof *f->items, cmp_priority);
        for (size_t q = k; q < c_end; q++) {
            qg_finding c = f->items[q];
            int free_ = 1;
            for (size_t t = taken_from; t < out && free_; t++)
                free_ = c.end <= f->items[t].start || f->items[t].end <= c.start;
            if (free_) f->items[out++] = c;
        }
        k = c_end;
    }
    f->len = out;
    qsort(f->items, out, sizeof *f->items, cmp_start_end);
    return 0;
}

/* The width of the single space, dot or dash separator (dash_sep) that ends at the byte j, or 0. */
static int glue_before(const scan_t *s, int64_t j) {
    for (int w = 4; w >= 1; w--)
        if (j - w >= 0 && ((w == 1 && (at(s, j - 1) == ' ' || at(s, j - 1) == '.')) || dash_sep(s, j - w) == w))
            return w;
    return 0;
}

/* Where the stretch of a card from the digit at code point a (byte ab) starts once the uncovered
 * digit groups glued before it (from limit on) are taken in, and a parenthesised area code before
 * one ("(555) ", "(555)"); _glued_start of the reference. Every character stepped over is ASCII,
 * so a byte back is a code point back. */
static int ipv4_head(const scan_t *s, int64_t b);

static int64_t glued_start(const scan_t *s, int64_t ab, int64_t a, int64_t limit) {
    int sep = glue_before(s, ab);
    if (sep == 1 && at(s, ab - 1) == ' ' && !dash_sep(s, (int64_t)RUN_END(s, (size_t)ab, is_digit, 20))) return a;
    if (ipv4_head(s, ab - 1)) return a; /* "10.0.0.1.4111111111111111" */
    int64_t d = ab - a; /* bytes minus code points: constant over the ASCII walked back */
    int64_t glue = a;   /* where the glue before the stretch ends: its first digit, or an area code's '(' */
    for (;;) {
        int64_t g = glue - sep - 1;
        if (sep && g >= limit && is_digit(at(s, g + d))) {
            while (g > limit && is_digit(at(s, g - 1 + d))) g--;
            glue = g;
        } else {
            g = glue - 4 - sep;
            if (!(g >= limit && at(s, g - 1 + d) == '(' && at(s, g + 3 + d) == ')' && is_digit(at(s, g + d)) &&
                  is_digit(at(s, g + 1 + d)) && is_digit(at(s, g + 2 + d))))
                return a;
            glue = g - 1;
            if (is_alpha(at(s, glue - 1 + d))) return g; /* the '(' parts the area code from the word */
        }
        if (is_alpha(at(s, glue - 1 + d))) return a;
        a = g;
        sep = glue_before(s, glue + d);
    }
}

/* Whether ".a.b.c.d" at the byte b is an IPv4 address (each part 0-255, no leading zero) that
 * nothing glues on to; _ipv4_tail of the reference. */
static int ipv4_tail(const scan_t *s, int64_t b) {
    for (int q = 0; q < 4; q++) {
        if (at(s, b) != '.') return 0;
        int64_t k = (int64_t)RUN_END(s, (size_t)(b + 1), is_digit, 4);
        int64_t w = k - b - 1;
        if (w < 1 || w > 3 || (w > 1 && s->b[b + 1] == '0')) return 0;
        int v = 0;
        for (int64_t r = b + 1; r < k; r++) v = v * 10 + (s->b[r] - '0');
        if (v > 255) return 0;
        b = k;
    }
    return !is_alpha(at(s, b)) && !dash_sep(s, b) && !(at(s, b) == '.' && is_digit(at(s, b + 1)));
}

/* Whether "a.b.c.d." ending at the dot at the byte b is an IPv4 address (each part 0-255, no
 * leading zero) that nothing glues on to before it; the mirror of ipv4_tail, _ipv4_head of the
 * reference. */
static int ipv4_head(const scan_t *s, int64_t b) {
    for (int q = 0; q < 4; q++) {
        int64_t k = b;
        while (k > b - 4 && is_digit(at(s, k - 1))) k--;
        int64_t w = b - k;
        if (at(s, b) != '.' || w < 1 || w > 3 || (w > 1 && s->b[k] == '0')) return 0;
        int v = 0;
        for (int64_t r = k; r < b; r++) v = v * 10 + (s->b[r] - '0');
        if (v > 255) return 0;
        b = k - 1;
    }
    if (is_alpha(at(s, b)) || (at(s, b) == '.' && is_digit(at(s, b - 1)))) return 0;
    for (int w = 1; w <= 4; w++)
        if (b + 1 - w >= 0 && dash_sep(s, b + 1 - w) == w) return 0;
    return 1;
}

/* Each CREDIT_CARD finding of s->out (disjoint, by start) run on over the digit groups glued
 * after it by a dot or a dash separator, up to a group that the next finding starts or covers or
 * that a letter is glued after, the first group also after a single space when a dash separator
 * glues the next to it or it is 3 digits a dot joins to 4 ("555.1234"), and not over a dotted IPv4 tail (ipv4_tail); _glued_after of the reference. ascii: offsets are bytes (else code
 * points, mapped to bytes by one cursor moving forward; the glue and digits are ASCII). */
static void glued_after(const scan_t *s, int ascii) {
    qg_finding *it = s->out->items;
    size_t len = s->out->len, pos_b = 0;
    int64_t cp = 0;
    for (size_t x = 0; x < len; x++) {
        if (it[x].type != QG_CREDIT_CARD) continue;
        int64_t end = it[x].end;
        if (!ascii)
            for (; cp < end; pos_b++) cp += (s->b[pos_b] & 0xC0) != 0x80;
        int64_t b = ascii ? end : (int64_t)pos_b, d = b - end;
        int64_t limit = x + 1 < len ? it[x + 1].start : INT64_MAX;
        if (ipv4_tail(s, b)) continue;
        if (at(s, b) == ' ' && is_digit(at(s, b + 1))) {
            /* a single space, then a number a dash glues on ("4111 1111 1111 1111 555-1234") */
            int64_t k = (int64_t)RUN_END(s, (size_t)(b + 1), is_digit, s->n);
            int w = dash_sep(s, k);
            if (!w && k - b == 4 && at(s, k) == '.' && (int64_t)RUN_END(s, (size_t)(k + 1), is_digit, 5) == k + 5)
                w = 1; /* a phone number's "555.1234"; a decimal of another shape ("2.5", "12.99") stays apart */
            int64_t k2 = (int64_t)RUN_END(s, (size_t)(k + w), is_digit, s->n);
            if (w && k - d <= limit && (k2 - d > limit || !is_alpha(at(s, k2)))) b = k;
        }
        for (;;) {
            int w = dash_sep(s, b);
            if (!w && at(s, b) == '.' && is_digit(at(s, b + 1))) w = 1;
            int64_t k = (int64_t)RUN_END(s, (size_t)(b + w), is_digit, s->n);
            if (!w || k - d > limit || is_alpha(at(s, k))) break;
            b = k;
        }
        it[x].end = b - d;
    }
}

/* Whether the bytes [a, s) hold a country code alone among their digits (1-3 digits, after a "00"
 * or "011" exit code); _code_only of the reference. A phone finding's bytes are ASCII. */
static int code_only(const unsigned char *b, size_t a, size_t s) {
    char d[8];
    int n = 0;
    for (size_t q = a; q < s; q++)
        if (is_digit(b[q])) {
            if (n == 7) return 0;
            d[n++] = (char)b[q];
        }
    int skip = (n >= 3 && d[0] == '0' && d[1] == '1' && d[2] == '1') ? 3 : (n >= 2 && d[0] == '0' && d[1] == '0') ? 2 : 0;
    return n - skip >= 1 && n - skip <= 3;
}

/* The resolved findings f (disjoint, by start) and a CREDIT_CARD finding for each stretch of a
 * card floor that they leave uncovered, from its first digit to its last; no finding is changed but
 * a CREDIT_CARD finding such a stretch runs into, which starts at the stretch instead, and a PHONE
 * finding that reads a card after its country code (code_only), which becomes a card finding.
 * ascii: offsets are bytes (else the floors' starts are converted to code points here).
 * _cover_cards of the reference. Returns -1 when out of memory. */
static int cover_cards(const scan_t *s, int ascii) {
    qg_findings *f = s->out;
    const unsigned char *b = s->b;
    /* The stretches, in start order: a card's uncovered digits lie past every digit of the cards
     * before it, all covered by then. Kept apart from f and merged at the end, so none is
     * inserted into the middle of a long list. */
    qg_finding *added = NULL;
    size_t na = 0, cap = 0, pos_b = 0;
    int64_t cp = 0;
    for (size_t q = 0; q < s->nfloors; q++) {
        size_t bs = s->floors[q].start;
        if (!ascii)
            for (; pos_b < bs; pos_b++) cp += (b[pos_b] & 0xC0) != 0x80;
        int64_t cs = ascii ? (int64_t)bs : cp, ce = cs + (int64_t)(s->floors[q].end - bs);
        size_t lo = 0, hi = f->len;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (f->items[mid].start < cs) lo = mid + 1;
            else hi = mid;
        }
        int64_t grown = -1;
        if (lo && f->items[lo - 1].type == QG_PHONE && f->items[lo - 1].end > cs &&
            code_only(b, bs - (size_t)(cs - f->items[lo - 1].start), bs)) {
            /* a card read inside a phone finding after its country code ("+1 4111 1111 1149 9") is
             * a card, from its first digit or the groups glued to it; a gap after it extends it */
            grown = (int64_t)lo - 1;
            f->items[grown].start = glued_start(s, (int64_t)bs, cs, f->items[grown].start);
            f->items[grown].type = QG_CREDIT_CARD;
            f->items[grown].validator = QG_V_LUHN;
        }
        int64_t limit = lo ? f->items[lo - 1].end : 0;
        if (na && added[na - 1].end > limit) limit = added[na - 1].end;
        int64_t glued = limit <= cs ? glued_start(s, (int64_t)bs, cs, limit) : cs;
        if (glued < cs && lo < f->len && f->items[lo].start == cs && f->items[lo].type == QG_CREDIT_CARD) {
            f->items[lo].start = glued; /* the card is a card finding already: it starts at the glued groups */
            glued = cs;
        } else if (glued < cs && lo < f->len && f->items[lo].start == cs) {
            /* the card is a finding already: the groups glued to it are a stretch of their own */
            qg_finding *grown = room(added, &cap, na, sizeof *grown, 16);
            if (!grown) {
                free(added);
                return -1;
            }
            added = grown;
            int64_t end = cs;
            while (!is_digit(b[bs + (size_t)(end - 1 - cs)])) end--;
            added[na++] = (qg_finding){glued, end, QG_CREDIT_CARD, QG_V_LUHN};
            glued = cs;
        }
        size_t k = lo, m = na, na0 = na;
        if (k && f->items[k - 1].end > cs) k--;
        while (m && added[m - 1].end > cs) m--;
        int64_t pos = cs;
        for (;;) {
            /* the next finding or stretch reaching into the card, in start order */
            int from_added = m < na0 && added[m].start < ce &&
                             !(k < f->len && f->items[k].start < added[m].start);
            int from_f = !from_added && k < f->len && f->items[k].start < ce;
            int64_t next = from_added ? added[m].start : from_f ? f->items[k].start : ce;
            int64_t reach = from_added ? added[m].end : from_f ? f->items[k].end : ce;
            if (next > pos) {
                int64_t a = pos, e = next;
                while (!is_digit(b[bs + (size_t)(a - cs)])) a++;
                while (!is_digit(b[bs + (size_t)(e - 1 - cs)])) e--;
                if (a < e && grown >= 0 && f->items[grown].end == pos) {
                    f->items[grown].end = e; /* the card read inside a phone finding goes on */
                } else if (a < e && na && added[na - 1].end == pos && pos > cs) {
                    /* the stretch goes on one this card already reaches into: one placeholder */
                    added[na - 1].end = e;
                } else if (a < e && from_f && f->items[k].type == QG_CREDIT_CARD) {
                    /* the stretch runs into a card finding: that finding starts where it does */
                    f->items[k].start = a == cs ? glued : a;
                } else if (a < e) {
                    if (a == cs) a = glued;
                    qg_finding *grown = room(added, &cap, na, sizeof *grown, 16);
                    if (!grown) {
                        free(added);
                        return -1;
                    }
                    added = grown;
                    added[na++] = (qg_finding){a, e, QG_CREDIT_CARD, QG_V_LUHN};
                }
            }
            if (!from_added && !from_f) break;
            if (reach > pos) pos = reach;
            if (from_added) m++;
            else k++;
        }
    }
    if (!na) {
        glued_after(s, ascii);
        return 0;
    }
    qg_finding *all = malloc((f->len + na) * sizeof *all);
    if (!all) {
        free(added);
        return -1;
    }
    size_t x = 0, y = 0, z = 0;
    while (x < f->len || y < na)
        all[z++] = (y == na || (x < f->len && f->items[x].start < added[y].start)) ? f->items[x++] : added[y++];
    free(f->items);
    free(added);
    f->items = all;
    f->len = f->cap = z;
    glued_after(s, ascii);
    return 0;
}

/* ------------------------------------------------------------------------------- driver */
int qg_detect(const unsigned char *b, size_t n, qg_findings *out) {
    scan_t s = {b, n, out, 0, NULL, 0, 0};
    int ascii = 1;
    out->len = 0;
    for (size_t i = 0; i < n && !s.oom; i++) {
        int c = b[i];
        if (c >= 0x80) {
            ascii = 0;
            continue;
        }
        int prev = i ? b[i - 1] : -1;
        if (is_digit(c) && !(prev >= 0 && is_digit(prev))) {
            chain(&s, i);
            card_floor(&s, i);
        }
        if (is_alpha(c)) iban(&s, i);
        if (c == 'A' || c == 'g' || c == 'x' || c == 's' || c == 'r') token(&s, i);
        /* The later prefixes all need a start of word: most of their letters are not one. */
        else if ((c == 'G' || c == 'S' || c == 'h' || c == 'n' || c == 'p' || c == 'P' || c == 'd' || c == 'k' ||
                  c == 'l') &&
                 !(prev >= 0 && is_alnum(prev)))
            token(&s, i);
        if (c == '@') email(&s, i);
        if (c == ':' && i + 3 <= n && b[i + 1] == '/' && b[i + 2] == '/') url(&s, i);
        if (c == 'e' && i + 3 <= n && b[i + 1] == 'y' && b[i + 2] == 'J') jwt(&s, i);
        if (c == '-' && starts_with(&s, i, PEM_BEGIN)) pem(&s, i);
        if (is_b64(c) && !(prev >= 0 && is_b64(prev))) aws_secret(&s, i);
        if (c == '=' || c == ':') generic(&s, i);
        else if (c == '<') xml_element(&s, i);
        else if (c == 'n' || c == 'N' || c == 'k' || c == 'K') pair(&s, i);
        else if (c == '-') flag(&s, i);
        else if (c == 'E' || c == 'e') docker_env(&s, i);
    }
    int rc = s.oom ? -1 : 0;
    if (!rc && !ascii) to_code_points(b, out);
    if (!rc) rc = resolve(out);
    if (!rc && s.nfloors) rc = cover_cards(&s, ascii);
    free(s.floors);
    return rc;
}

void qg_findings_free(qg_findings *f) {
    free(f->items);
    f->items = NULL;
    f->len = f->cap = 0;
}
