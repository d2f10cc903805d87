/* Secret/PII detector over UTF-8 text. The specification is qdrant_guard/_detect_py.py. */
#ifndef QG_DETECT_H
#define QG_DETECT_H

#include <stddef.h>
#include <stdint.h>

/* Finding types, strongest first: the order of FINDING_TYPES in the reference. */
enum qg_type {
    QG_PRIVATE_KEY, QG_AWS_ACCESS_KEY, QG_AWS_SECRET_KEY, QG_GITHUB_TOKEN, QG_GITLAB_TOKEN,
    QG_SLACK_TOKEN, QG_STRIPE_KEY, QG_ANTHROPIC_KEY, QG_OPENAI_KEY, QG_GOOGLE_API_KEY,
    QG_GOOGLE_OAUTH_SECRET, QG_NPM_TOKEN, QG_PYPI_TOKEN, QG_SENDGRID_KEY, QG_TWILIO_KEY,
    QG_HUGGINGFACE_TOKEN, QG_SHOPIFY_TOKEN, QG_DIGITALOCEAN_TOKEN, QG_MAILGUN_KEY, QG_DATABRICKS_TOKEN,
    QG_POSTMAN_KEY, QG_LINEAR_KEY, QG_DOPPLER_TOKEN, QG_AZURE_STORAGE_KEY, QG_JWT, QG_DATABASE_URL_PASSWORD,
    QG_GENERIC_SECRET, QG_IBAN, QG_CREDIT_CARD, QG_SSN, QG_EMAIL, QG_PHONE, QG_NTYPES
};

/* Validators in byte order of their names, so comparing the enums compares the names. */
enum qg_validator {
    QG_V_AWS_CONTEXT, QG_V_E164, QG_V_ENTROPY35, QG_V_ENTROPY45, QG_V_FORMAT, QG_V_JWT_HEADER,
    QG_V_LUHN, QG_V_MOD97, QG_V_NANP, QG_V_PASSPHRASE, QG_V_PASSWORD_CHARSET, QG_V_PEM_ARMOR, QG_V_PEM_BEGIN, QG_V_SSA, QG_V_URL_USERINFO,
    QG_NVALIDATORS
};

typedef struct {
    int64_t start; /* code-point offsets once qg_detect returns */
    int64_t end;
    int type;
    int validator;
} qg_finding;

typedef struct {
    qg_finding *items;
    size_t len;
    size_t cap;
} qg_findings;

extern const char *const qg_type_names[QG_NTYPES];
extern const char *const qg_validator_names[QG_NVALIDATORS];

/* Scan buf[0:n] (UTF-8; lone surrogates encoded as 3-byte sequences are fine). On success out
 * holds the non-overlapping findings sorted by (start, end) with code-point offsets and 0 is
 * returned; -1 means out of memory. Touches no Python object: callable without the GIL. */
int qg_detect(const unsigned char *buf, size_t n, qg_findings *out);
void qg_findings_free(qg_findings *f);

#endif
