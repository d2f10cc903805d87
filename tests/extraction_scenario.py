"""A nearest-neighbour extraction scenario, shared by the evaluation tests.

A restricted 20-chunk board memo sits among eight other sources (120 chunks). An attacker sends
one paraphrase-like query per memo chunk and collects whatever comes back; benign users ask about
the other sources and each expect one known chunk. No embedding model is involved: :func:`embed`
is a deterministic hashed bag-of-words + character-trigram vector, so texts sharing words are close.

The helpers take a ``search`` callable so the same scenario can run against a raw client with
hand-applied defences (tests/test_extraction_eval.py) or through the guarded client.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

DIM = 256
RESTRICTED_SOURCE = "board-memo"
COLLECTION = "corpus"

MEMO_CHUNKS = [
    "The board approved the acquisition of Halvorsen Robotics for 412 million dollars, subject to regulatory review in the third quarter.",
    "Closing of the Halvorsen deal is targeted for November; the purchase will be financed by a new 300 million term loan and cash on hand.",
    "The chief executive will announce a restructuring of the logistics division, eliminating roughly 640 positions across three warehouses.",
    "Severance costs for the logistics restructuring are estimated at 38 million and will be booked as a one-time charge in Q4.",
    "Project Nightjar, the autonomous forklift programme, missed its safety certification milestone and is now nine months late.",
    "The audit committee flagged a revenue recognition issue in the Brazilian subsidiary affecting about 11 million of reported sales.",
    "External counsel advises that the Brazilian revenue restatement does not require an 8-K filing if corrected before the annual report.",
    "The board voted to suspend the share buyback programme until the Halvorsen acquisition closes and leverage falls below 2.5 times.",
    "Chief financial officer Dana Whitlock will step down in January; the search committee has shortlisted two external candidates.",
    "Interim finance leadership will be provided by the group controller, Marcus Oyelaran, until a permanent CFO is appointed.",
    "Pricing for the 2025 enterprise contracts will rise by seven percent, with a confidential cap of four percent for the top ten customers.",
    "The largest customer, Northwind Freight, has signalled it may move its fleet telematics business to a competitor next year.",
    "A retention package of 2.1 million in restricted stock was approved for the twelve engineers leading the Nightjar programme.",
    "The compensation committee approved a 15 percent bonus pool reduction for senior management because of the missed Nightjar milestone.",
    "Cybersecurity review: a ransomware attempt in March reached the staging network but was contained before any customer data was taken.",
    "The board asked management to disclose the March ransomware incident to the cyber insurer but not publicly unless required by law.",
    "The Rotterdam distribution centre lease will not be renewed; operations move to the Antwerp site by the end of the second quarter.",
    "Litigation update: the patent dispute with Kestrel Systems is expected to settle for between 6 and 9 million dollars.",
    "Guidance for next year will be set at 4 to 6 percent revenue growth, below analyst consensus, and will be communicated in February.",
    "Next board meeting: review of the Halvorsen integration plan, the new CFO appointment and the updated enterprise risk register.",
]

# One paraphrase-ish query per memo chunk: a chunk sentence with a few words changed.
ATTACK_QUERIES = [
    "did the board approve buying Halvorsen Robotics for 412 million pending regulatory review",
    "when is the Halvorsen deal closing and how is the purchase financed, new term loan or cash",
    "will the chief executive announce a logistics division restructuring cutting about 640 jobs at warehouses",
    "what are the severance costs for the logistics restructuring, one-time charge in Q4",
    "Project Nightjar autonomous forklift programme missed the safety certification milestone, how late",
    "audit committee revenue recognition issue at the Brazilian subsidiary, how much reported sales",
    "does counsel say the Brazilian revenue restatement needs an 8-K filing before the annual report",
    "did the board suspend the share buyback until the Halvorsen acquisition closes and leverage drops",
    "is chief financial officer Dana Whitlock stepping down and who did the search committee shortlist",
    "who provides interim finance leadership, the group controller Marcus Oyelaran, until a CFO is appointed",
    "enterprise contracts pricing rise of seven percent and the confidential cap for top ten customers",
    "is the largest customer Northwind Freight moving its fleet telematics business to a competitor",
    "retention package in restricted stock approved for the engineers leading the Nightjar programme",
    "compensation committee bonus pool reduction for senior management after the missed Nightjar milestone",
    "cybersecurity review of the March ransomware attempt on the staging network, was customer data taken",
    "should management disclose the March ransomware incident to the cyber insurer or publicly",
    "Rotterdam distribution centre lease not renewed, operations moving to the Antwerp site",
    "litigation update on the Kestrel Systems patent dispute, expected settlement in millions",
    "revenue growth guidance for next year below analyst consensus, communicated in February",
    "agenda of the next board meeting: Halvorsen integration plan, CFO appointment, risk register",
]

OTHER_CHUNKS: dict[str, list[str]] = {
    "hr-handbook": [
        "Employees accrue 25 days of paid annual leave per year, prorated for part-time contracts.",
        "Parental leave is 20 weeks at full pay for the primary carer and 6 weeks for the secondary carer.",
        "Remote work is allowed up to three days a week with your manager's agreement.",
        "Expense claims must be submitted within 60 days with itemised receipts attached.",
        "The probation period for new hires is six months, with a review meeting at month three.",
        "Sick leave of more than five consecutive days requires a doctor's note.",
        "Annual performance reviews take place in March, with calibration sessions in April.",
        "The learning budget is 1,500 euros per employee per year for courses and conferences.",
        "Overtime must be pre-approved and is compensated with time off in lieu.",
        "The company pension scheme matches employee contributions up to five percent of salary.",
        "Harassment concerns can be raised confidentially with HR or through the ethics hotline.",
        "Notice periods are one month during probation and three months afterwards.",
        "Bicycle commuters can lease an e-bike through the salary sacrifice scheme.",
        "Volunteering days: every employee gets two paid days a year for charity work.",
        "Relocation support covers moving costs and one month of temporary housing.",
    ],
    "it-runbook": [
        "To reset a forgotten password, use the self-service portal and confirm with your second factor.",
        "VPN access requires the corporate certificate installed by the device management agent.",
        "Laptops are encrypted with full-disk encryption; the recovery key is escrowed in the MDM console.",
        "Report a phishing email with the report button in the mail client; do not forward it.",
        "New software requests go through the service desk and need a security review for cloud apps.",
        "Printers on the third floor are mapped automatically when you connect to the office Wi-Fi.",
        "Database backups run nightly at 02:00 UTC and are retained for 35 days.",
        "On-call engineers are paged through the incident tool; acknowledge within 15 minutes.",
        "Kubernetes clusters are upgraded quarterly during the Sunday maintenance window.",
        "Lost or stolen devices must be reported within one hour so they can be wiped remotely.",
        "Shared drives are being migrated to the document management system by year end.",
        "Multi-factor authentication is mandatory for email, VPN and the HR system.",
        "Monitors and docking stations can be ordered from the hardware catalogue.",
        "Production access requires a just-in-time approval that expires after four hours.",
        "The guest Wi-Fi password rotates weekly and is shown on the reception screen.",
    ],
    "product-faq": [
        "The telematics unit reports vehicle location every 30 seconds over LTE.",
        "Fleet dashboards show fuel consumption, idle time and harsh braking events per driver.",
        "Geofences can be drawn on the map and trigger alerts when a vehicle enters or leaves.",
        "The mobile app works offline and syncs delivery confirmations when coverage returns.",
        "Route optimisation considers delivery windows, vehicle capacity and live traffic.",
        "Customers can export trip reports as CSV or connect through the REST API.",
        "Driver scorecards rank safety behaviour and can be shared in weekly emails.",
        "The cold-chain sensor logs container temperature and alerts above a set threshold.",
        "Hardware is installed by certified partners in about forty minutes per vehicle.",
        "Data retention for trip history is 24 months on the standard plan.",
        "Single sign-on is supported with SAML and OpenID Connect identity providers.",
        "The forklift telemetry add-on tracks battery level and operating hours in warehouses.",
        "Maintenance reminders are generated from odometer readings and engine hours.",
        "Electric vehicle support shows state of charge and suggests charging stops.",
        "The API rate limit is 600 requests per minute per customer account.",
    ],
    "engineering-blog": [
        "How we cut our build times in half by caching Docker layers in the CI pipeline.",
        "Lessons from migrating our time-series storage from a relational database to columnar files.",
        "Why we chose gRPC for service-to-service calls and kept REST for public endpoints.",
        "Debugging a memory leak in our Go ingestion service with heap profiles.",
        "Designing idempotent event handlers so retries never double-charge a customer.",
        "Our approach to feature flags: short-lived toggles, owners and automatic expiry.",
        "Load testing the map tiles service with synthetic traffic from three regions.",
        "Structured logging and trace ids made our incident reviews much faster.",
        "Running chaos experiments in staging to test how services fail when a zone goes down.",
        "A practical guide to schema evolution with Protocol Buffers in long-lived streams.",
        "What we learned from rewriting the route planner's hot loop in Rust.",
        "Keeping on-call humane: alert budgets, runbooks and follow-the-sun rotations.",
        "How we test firmware updates on a rack of real telematics devices before rollout.",
        "Choosing partition keys for Kafka topics that carry per-vehicle events.",
        "Building an internal developer portal with service ownership and scorecards.",
    ],
    "sales-playbook": [
        "Qualify leads with budget, authority, need and timeline before booking a demo.",
        "Discovery calls should uncover the fleet size, current tooling and key pain points.",
        "Use the ROI calculator to show fuel savings from idle time reduction.",
        "Standard discount authority is ten percent for account executives, more needs approval.",
        "Send the security questionnaire pack early to shorten procurement cycles.",
        "Pilots run for 60 days with up to 25 vehicles and clear success criteria.",
        "Handle the price objection by anchoring on safety incident costs avoided.",
        "Multi-year contracts get a price lock and priority access to new features.",
        "Log every customer interaction in the CRM within 24 hours.",
        "Partner-sourced deals pay the reseller a referral fee of eight percent.",
        "Quarterly business reviews with key accounts cover usage, outcomes and renewals.",
        "Competitive battlecards summarise strengths and weaknesses of rival telematics vendors.",
        "Public sector tenders require a compliance matrix and references from similar fleets.",
        "Renewal conversations start 120 days before the contract end date.",
        "Upsell the cold-chain sensor to grocery and pharmaceutical delivery customers.",
    ],
    "support-kb": [
        "If a device shows offline, check the SIM status and the vehicle's ignition wiring.",
        "GPS drift near tall buildings is expected; enable map matching to smooth tracks.",
        "To reassign a device to another vehicle, unlink it in the asset page first.",
        "Drivers who cannot log in to the app should update to the latest version.",
        "Missing trips are usually caused by a disconnected power cable; reseat the harness.",
        "Alert emails going to spam can be fixed by allowlisting our sending domain.",
        "Temperature sensor readings of minus 127 mean the probe is disconnected.",
        "Bulk import vehicles using the spreadsheet template from the fleet settings page.",
        "Invoices can be downloaded from the billing section by account administrators.",
        "Reset a driver PIN from the driver profile; the new PIN is sent by text message.",
        "Firmware updates install automatically overnight when the vehicle is parked.",
        "Report wrong speed limit data with the feedback button on the trip view.",
        "Forklift units need the warehouse gateway online to upload telemetry.",
        "API tokens expire after one year and can be rotated from the developer settings.",
        "Time zone issues in reports are fixed by setting the account's default time zone.",
    ],
    "facilities": [
        "The Antwerp office canteen is open from 11:30 to 14:00 on weekdays.",
        "Meeting rooms are booked through the calendar; release them if plans change.",
        "Visitors must sign in at reception and wear a badge at all times.",
        "The fire assembly point for headquarters is the car park across the street.",
        "Bike storage is in the basement; access it with your employee badge.",
        "Lockers are assigned per quarter; empty them before the cleaning day.",
        "Report broken equipment or leaks through the facilities request form.",
        "Parking spaces for electric cars have chargers; move your car once charged.",
        "First aid kits and defibrillators are located next to each lift.",
        "Quiet zones on the fourth floor are for focused work without calls.",
        "The mail room handles outgoing parcels until 16:00 each day.",
        "Air conditioning schedules are adjusted seasonally; contact facilities for changes.",
        "Desk booking is required on Tuesdays and Thursdays when the office is busiest.",
        "Recycling bins for paper, plastic and batteries are on every floor.",
        "The building closes at 22:00; out-of-hours access needs security approval.",
    ],
    "customer-newsletter": [
        "Spring release: new driver coaching videos and an improved trip timeline.",
        "Customer story: a dairy cooperative cut fuel costs by twelve percent in six months.",
        "Join our webinar on preparing fleets for low-emission zones in European cities.",
        "We now support tachograph downloads for heavy goods vehicles.",
        "Tips for reducing idle time during winter without compromising driver comfort.",
        "Our annual user conference returns in Lisbon this October.",
        "New integration with popular accounting software for automatic mileage claims.",
        "Customer story: a bus operator improved on-time performance with live tracking.",
        "Safety month: share your best practices for fewer harsh braking events.",
        "Introducing dark mode and accessibility improvements in the mobile app.",
        "How electric vans change route planning: range, charging and payload.",
        "Holiday season delivery peaks: planning capacity with historical data.",
        "Meet the support team: faster answers with our new chat assistant.",
        "Roadmap preview: predictive maintenance alerts based on engine diagnostics.",
        "Thank you for 10,000 connected vehicles in the Benelux region.",
    ],
}

# Benign questions about the other sources: (query, source, index of the relevant chunk).
BENIGN_QUERIES: list[tuple[str, str, int]] = [
    ("how many days of paid annual leave do employees accrue", "hr-handbook", 0),
    ("what is the parental leave at full pay for a primary carer", "hr-handbook", 1),
    ("how do I reset a forgotten password with the self-service portal", "it-runbook", 0),
    ("how long are nightly database backups retained", "it-runbook", 6),
    ("how often does the telematics unit report vehicle location", "product-faq", 0),
    ("can I export trip reports as CSV or use the REST API", "product-faq", 5),
    ("blog post on caching Docker layers to cut build times in CI", "engineering-blog", 0),
    ("idempotent event handlers so retries never double-charge", "engineering-blog", 4),
    ("what is the standard discount authority for account executives", "sales-playbook", 3),
    ("how long do pilots run and with how many vehicles", "sales-playbook", 5),
    ("device shows offline, check SIM status and ignition wiring", "support-kb", 0),
    ("temperature sensor reading of minus 127, probe disconnected", "support-kb", 6),
    ("when is the Antwerp office canteen open", "facilities", 0),
    ("where is the fire assembly point for headquarters", "facilities", 3),
    ("customer story about a dairy cooperative cutting fuel costs", "customer-newsletter", 1),
    ("webinar on preparing fleets for low-emission zones", "customer-newsletter", 2),
]

_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it its of on or our so the their "
    "this to up we what when where who will with you your until about not any all".split()
)


def _bucket(feature: str) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % DIM, (1.0 if (value >> 63) & 1 else -1.0)


def embed(text: str) -> list[float]:
    """Deterministic 256-d embedding: hashed words (weight 1) + char trigrams (weight 0.25), L2-normalised."""
    vec = [0.0] * DIM
    words = [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS]
    for word in words:
        index, sign = _bucket("w:" + word)
        vec[index] += sign
        padded = f" {word} "
        for i in range(len(padded) - 2):
            index, sign = _bucket("t:" + padded[i : i + 3])
            vec[index] += 0.25 * sign
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


@dataclass(frozen=True)
class Corpus:
    """What :func:`build_collection` wrote: ids of the memo chunks and of each benign target."""

    collection: str
    memo_ids: list[int]
    other_ids: dict[str, list[int]]
    source_sizes: dict[str, int]

    def target_of(self, source: str, index: int) -> int:
        """The point id of chunk ``index`` of ``source``."""
        return self.memo_ids[index] if source == RESTRICTED_SOURCE else self.other_ids[source][index]


def build_collection(client: Any, collection: str = COLLECTION) -> Corpus:
    """Create ``collection`` on ``client`` and upsert all chunks with payload ``source``/``chunk``/``text``."""
    from qdrant_client import models

    client.create_collection(collection, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    points, memo_ids, other_ids = [], [], {}
    next_id = 1
    for source, chunks in [(RESTRICTED_SOURCE, MEMO_CHUNKS), *OTHER_CHUNKS.items()]:
        ids = []
        for index, text in enumerate(chunks):
            points.append(
                models.PointStruct(id=next_id, vector=embed(text), payload={"source": source, "chunk": index, "text": text})
            )
            ids.append(next_id)
            next_id += 1
        if source == RESTRICTED_SOURCE:
            memo_ids = ids
        else:
            other_ids[source] = ids
    client.upsert(collection, points, wait=True)
    sizes = {RESTRICTED_SOURCE: len(MEMO_CHUNKS), **{s: len(c) for s, c in OTHER_CHUNKS.items()}}
    return Corpus(collection=collection, memo_ids=memo_ids, other_ids=other_ids, source_sizes=sizes)


# search(principal, query_text) -> the points the principal actually receives (objects with .id).
Search = Callable[[str, str], Sequence[Any]]


def run_attack(search: Search, corpus: Corpus, principal: str = "mallory") -> set[int]:
    """Send every attack query as ``principal``; return the distinct memo point ids received."""
    memo = set(corpus.memo_ids)
    recovered: set[int] = set()
    for query in ATTACK_QUERIES:
        recovered.update(p.id for p in search(principal, query) if p.id in memo)
    return recovered


def benign_recall(search: Search, corpus: Corpus, queries_per_user: int = 2) -> float:
    """Fraction of benign questions whose relevant chunk is received.

    Users ask ``queries_per_user`` questions each (``user-0``, ``user-1``, ...), so budgets are
    shared across a user's questions as they would be in practice.
    """
    found = 0
    for n, (query, source, index) in enumerate(BENIGN_QUERIES):
        got = {p.id for p in search(f"user-{n // queries_per_user}", query)}
        found += corpus.target_of(source, index) in got
    return found / len(BENIGN_QUERIES)
