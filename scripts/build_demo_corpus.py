"""Deterministic generator of the bilingual (Chinese + English) demo corpus.

The corpus tells six months of history of an AI agent team (planner, coder, reviewer, QA, auditor,
researcher, concierge and ETL agents) for three owners: ``team-alpha`` (largest), ``team-beta`` (medium)
and ``solo-gamma`` (small). About half of the text is Chinese, half English.

Everything comes from template tables below (one table per topic, every template written as a parallel
English/Chinese pair) filled with slot values drawn from ``random.Random(20260101)``, so the output is
identical on every run. Bilingual pairs render the same template and slots in both languages; they carry
``metadata.pair`` (``p01``.. for learnings, ``tp01``.. for tasks). Re-filed tasks carry
``metadata.dup_group``. The long project memories and the memories that later revise earlier decisions
are written out by hand.

Run from the repository root::

    python scripts/build_demo_corpus.py

It validates the corpus with :func:`check` and writes ``memory_pipelines/demo/data/demo.json``. ``memory-pipelines
run`` loads that file into the database (the ``demo_corpus`` asset), so run it again after regenerating.
Standard library only, no network.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any

SEED = 20260101
REF_DATE = date(2026, 1, 1)  # "today" of the story; ages count back from it
OUT_PATH = Path(__file__).resolve().parents[1] / "memory_pipelines" / "demo" / "data" / "demo.json"

OWNERS = ["team-alpha", "team-beta", "solo-gamma"]
TASK_TYPES = ("dev", "review", "qa", "audit", "research", "talk", "data")
TASK_STATUSES = ("pending", "in_progress", "completed", "failed", "cancelled")
FAILURE_CLASSES = ("NETWORK", "BILLING_CAP", "RATE_LIMIT", "RESOURCE", "AUTH", "TIMEOUT", "DATA", "LOGIC")
TRIGGER_EVENTS = ("systemic_failure", "rca_request", "task_failed", "alert", "escalation")
CATEGORIES = ("failure_pattern", "best_practice", "optimization", "insight")
GOAL_STATUSES = ("pending", "in_progress", "completed", "cancelled")
EVENT_TYPES = (
    "task_failed", "task_completed", "task_created", "alert", "layer2_health",
    "escalation", "systemic_failure", "rca_request",
)
CONTENT_TYPES = ("requirement", "plan", "development", "testing", "insight")
LANGS = ("en", "zh")
Pair = tuple[str, str]  # (English, Chinese)

# --------------------------------------------------------------------------------------------------
# Slot values
# --------------------------------------------------------------------------------------------------

PEOPLE_ZH = ["张伟", "李娜", "王芳", "刘洋", "陈静", "赵磊", "孙悦", "周杰", "黄敏", "吴昊"]
PEOPLE_EN = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Henry", "Ivan", "Judy"]
SERVICES = [
    "auth-service", "billing-api", "search-indexer", "relay-gateway", "notification-worker",
    "embedding-svc", "task-scheduler", "webhook-relay", "user-profile-api", "report-exporter",
    "memory-store", "harbor-loader",
]
TABLES = ["memory_chunks", "learnings", "task_events", "usage_ledger", "embeddings_v2", "user_sessions"]
PROVIDERS = ["OpenAI", "Anthropic", "GitHub API", "Stripe", "Slack API", "Feishu Open API", "Google OAuth"]
AGENTS = [
    "planner-agent", "coder-agent", "reviewer-agent", "qa-agent", "auditor-agent",
    "research-agent", "concierge-agent", "etl-agent",
]
CUSTOMERS = ["Acme Logistics", "Northwind", "星河教育", "云帆科技", "Blue Harbor Bank", "青木零售", "Globex"]
TESTS = [
    "test_hybrid_search_rank", "test_owner_isolation", "test_backfill_resume", "test_token_refresh_race",
    "test_chunker_zh_boundaries", "test_rate_limiter_shared_bucket", "test_event_window_24h",
    "test_learning_dedup", "test_export_csv_timezone", "test_migration_lock_timeout",
]
JOBS = ["embedding-backfill", "nightly-rollup", "usage-export", "learning-extractor", "event-compaction"]
MIGRATION_NAMES = [
    "owner_id_not_null", "hnsw_index", "usage_ledger_partitions", "drop_ivfflat", "tsvector_zh",
]
SCOPES = ["contents:write", "pull_requests:write", "issues:write", "checks:read"]
TECHS = [
    "pgvector halfvec", "bge-m3", "pg_trgm", "Reciprocal Rank Fusion", "ParadeDB pg_search", "Cohere rerank",
]
CI_ERRORS = [
    "psycopg.OperationalError: connection refused (localhost:5432)",
    'ERROR: extension "vector" is not available',
    "FAILED tests/test_search.py::test_hybrid_rank - AssertionError: 0.71 < 0.8",
    "Killed: 9 (runner out of memory)",
]
CHANGES: list[Pair] = [
    ("switch the embedding cache to an unlogged table", "embedding 缓存改用 unlogged 表"),
    ("jittered retry in the webhook sender", "webhook 发送增加带抖动的重试"),
    ("chunker respects sentence boundaries", "分块器按句子边界切分"),
    ("bump psycopg to 3.2", "psycopg 升级到 3.2"),
    ("filter search by owner_id in SQL", "在 SQL 中按 owner_id 过滤检索"),
    ("BILLING_CAP circuit breaker", "增加 BILLING_CAP 熔断"),
    ("store refresh tokens encrypted", "refresh token 加密存储"),
]
PURPOSES: list[Pair] = [
    ("cross-lingual retrieval", "跨语言检索"), ("shrinking the index", "缩小索引体积"),
    ("keyword fallback", "关键词兜底"), ("reranking learnings", "经验条目重排序"),
]
KRS: list[Pair] = [
    ("p95 retrieval latency < 200 ms", "检索 p95 延迟 < 200 ms"),
    ("task failure rate < 3%", "任务失败率 < 3%"),
    ("cross-lingual recall@10 >= 0.9", "跨语言 recall@10 >= 0.9"),
    ("provider spend -25%", "模型调用费用下降 25%"),
]
FEATURES: list[Pair] = [
    ("streaming ingestion of task events", "任务事件的流式入库"),
    ("per-owner learning de-duplication", "按 owner 的经验去重"),
    ("the query-embedding cache", "查询向量缓存"), ("chunk-level upserts", "分块级别的 upsert"),
]

OWNER_PROJECTS: dict[str, list[str]] = {
    "team-alpha": ["atlas-search", "relay-gateway", "ledger-billing", "agent-core"],
    "team-beta": ["harbor-etl", "sentinel-qa", "pulse-dashboard"],
    "solo-gamma": ["notes-bot"],
}
PROJECT_NAMES = {
    "atlas-search": "Atlas Search", "relay-gateway": "Relay Gateway", "ledger-billing": "Ledger Billing",
    "agent-core": "Agent Core", "harbor-etl": "Harbor ETL", "sentinel-qa": "Sentinel QA",
    "pulse-dashboard": "Pulse Dashboard", "notes-bot": "Notes Bot",
}
PROJECT_REPOS = {
    "atlas-search": ["atlas-search", "memory-pipelines"],
    "relay-gateway": ["relay-gateway", "infra-terraform"],
    "ledger-billing": ["ledger-billing"], "agent-core": ["agent-core", "eval-harness"],
    "harbor-etl": ["harbor-etl", "data-jobs"], "sentinel-qa": ["sentinel-qa", "e2e-suite"],
    "pulse-dashboard": ["pulse-web", "pulse-api"], "notes-bot": ["notes-bot"],
}

ERRORS: dict[str, list[str]] = {
    "NETWORK": [
        "ConnectionResetError: [Errno 104] Connection reset by peer",
        "getaddrinfo EAI_AGAIN {service}.internal",
        "ssl.SSLError: EOF occurred in violation of protocol",
    ],
    "TIMEOUT": [
        "httpx.ReadTimeout: read timed out after {sec}s",
        "asyncio.TimeoutError: no response from {service2} within {sec}s",
        "canceling statement due to statement timeout",
    ],
    "RATE_LIMIT": [
        "HTTP 429 Too Many Requests (Retry-After: 20)",
        "rate_limit_exceeded: {tpm} TPM limit reached",
        "403 You have exceeded a secondary rate limit",
    ],
    "BILLING_CAP": [
        "insufficient_quota: You exceeded your current quota",
        "402 Payment Required: monthly hard limit ${cap} reached",
    ],
    "AUTH": [
        "401 Unauthorized: token expired",
        "invalid_grant: refresh token already used",
        "403 Forbidden: Resource not accessible by integration",
    ],
    "RESOURCE": [
        "OOMKilled (exit code 137), limit {mb}Mi",
        "FATAL: sorry, too many clients already",
        "QueuePool limit of size {pool} overflow 0 reached, connection timed out",
        "OSError: [Errno 28] No space left on device",
    ],
    "DATA": [
        'UniqueViolation: duplicate key value violates unique constraint "tasks_pkey"',
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
        "DataException: expected {dim} dimensions, not {dim2}",
    ],
    "LOGIC": [
        "AssertionError: expected 3 retries, got 0",
        "KeyError: 'owner_id'",
        "TypeError: '<' not supported between instances of 'NoneType' and 'datetime'",
    ],
}


def _pick2(rng: random.Random, pool: list[Any]) -> tuple[Any, Any]:
    first, second = rng.sample(pool, 2)
    return first, second


def base_slots(rng: random.Random, project: str, age_days: float) -> dict[str, Any]:
    """Fresh slot values for one item; language-specific values are stored as pairs."""
    k = rng.randint(2, 9)
    rows = rng.randint(40, 950) * 1000
    cap = rng.choice([300, 500, 1000, 2000, 5000])
    dim, dim2 = _pick2(rng, [384, 768, 1024, 1536, 3072])
    service, service2 = _pick2(rng, SERVICES)
    return {
        "age_days": age_days,
        "people_zh": _pick2(rng, PEOPLE_ZH),
        "people_en": _pick2(rng, PEOPLE_EN),
        "service": service,
        "service2": service2,
        "repo": rng.choice(PROJECT_REPOS[project]),
        "project_name": PROJECT_NAMES[project],
        "pr": rng.randint(1100, 4899),
        "ver": f"v{rng.randint(1, 3)}.{rng.randint(0, 24)}.{rng.randint(0, 9)}",
        "env": rng.choice(["staging", "prod", "canary"]),
        "table": rng.choice(TABLES),
        "provider": rng.choice(PROVIDERS),
        "agent": rng.choice(AGENTS),
        "n": rng.randint(3, 60),
        "k": k,
        "runs": k + rng.randint(6, 40),
        "rows": f"{rows:,}",
        "rows2": f"{rows + rng.randint(100, 900) * 1000:,}",
        "pct": rng.randint(5, 35),
        "pct2": rng.randint(71, 89),
        "half": rng.randint(42, 61),
        "ms": rng.choice([38, 45, 62, 85, 120, 180, 240, 350, 480]),
        "sec": rng.choice([30, 60, 90, 120, 300]),
        "mb": rng.choice([180, 256, 512, 768, 1024, 2048]),
        "minutes": rng.randint(8, 55),
        "hours": rng.randint(2, 14),
        "retries": rng.randint(3, 6),
        "pool": rng.choice([10, 16, 20, 32, 50]),
        "test": rng.choice(TESTS),
        "cap": cap,
        "cap2": cap * 2,
        "cost": rng.randint(cap // 3, cap * 2),
        "tpm": rng.choice(["90,000", "150,000", "200,000", "450,000"]),
        "hh": rng.choice([1, 2, 3, 23]),
        "conc": rng.choice([4, 8, 12, 16, 24]),
        "lists": rng.choice([100, 500, 1000, 2000]),
        "migration": f"{rng.randint(31, 118):04d}_{rng.choice(MIGRATION_NAMES)}",
        "customer": rng.choice(CUSTOMERS),
        "dim": dim,
        "dim2": dim2,
        "job": rng.choice(JOBS),
        "scope": rng.choice(SCOPES),
        "ci_error": rng.choice(CI_ERRORS),
        "tech": rng.choice(TECHS),
        "q": rng.randint(1, 4),
        "loc": rng.randint(420, 2400),
        "files": rng.randint(9, 48),
        "rps": rng.choice([150, 200, 300, 450, 600]),
        "score_drop": rng.choice(["0.8", "1.1", "1.4"]),
        "change_pair": rng.choice(CHANGES),
        "purpose_pair": rng.choice(PURPOSES),
        "kr_pair": rng.choice(KRS),
        "feature_pair": rng.choice(FEATURES),
    }


def date_text(age_days: float, lang: str) -> str:
    """The calendar date ``age_days`` before REF_DATE, as an engineer would write it."""
    d = REF_DATE - timedelta(days=int(age_days))
    return f"{d.month}月{d.day}日" if lang == "zh" else f"{d.strftime('%b')} {d.day}"


def localize(slots: dict[str, Any], lang: str) -> dict[str, Any]:
    """Resolve the language-specific slots (people, date, bilingual phrases)."""
    i = LANGS.index(lang)
    out = dict(slots)
    people = slots["people_zh"] if lang == "zh" else slots["people_en"]
    out["person"], out["person2"] = people
    out["date"] = date_text(slots["age_days"], lang)
    for name in ("change", "purpose", "kr", "feature"):
        out[name] = slots[f"{name}_pair"][i]
    return out


_ZH_GAP = re.compile(r"(?<=[\u4e00-\u9fff])[ ]+(?=[\u4e00-\u9fff]|\d{1,2}月\d{1,2}日)")


def render(pair: Pair, lang: str, slots: dict[str, Any]) -> str:
    """Fill a template; in Chinese, drop the spaces that slot values leave between Chinese words."""
    text = pair[LANGS.index(lang)].format_map(slots)
    return _ZH_GAP.sub("", text) if lang == "zh" else text


# --------------------------------------------------------------------------------------------------
# Tasks: one table per topic; titles[i] and descs[i] are (English, Chinese) translations of each other
# --------------------------------------------------------------------------------------------------

TASK_TOPICS: list[dict[str, Any]] = [
    {
        "name": "deploy", "mix": True, "weight": 10, "types": ["dev"],
        "fail": ["NETWORK", "TIMEOUT", "AUTH", "RESOURCE"],
        "titles": [
            ("Deploy {service} {ver} to {env}", "发布 {service} {ver} 到 {env}"),
            ("Roll out {service} {ver} behind a canary", "{service} {ver} 金丝雀灰度上线"),
            ("Promote {service} build {ver} from staging to prod", "把 {service} {ver} 从 staging 推到 prod"),
        ],
        "descs": [
            ("{person} wants {service} {ver} out before the {date} freeze. The Helm chart bump is in PR "
             "#{pr}; run the smoke suite against {env} and watch the 5xx rate for {minutes} minutes after "
             "rollout.",
             "{person} 希望在 {date} 封版前发布 {service} {ver}。Helm chart 改动在 PR #{pr}，"
             "发布后对 {env} 跑冒烟测试，并观察 5xx 比例 {minutes} 分钟。"),
            ("Changes in this release: DB pool raised to {pool}, new /healthz probe, structured logs. "
             "Rollback: `helm rollback {service}` to the previous revision. On call: {person}.",
             "本次变更：数据库连接池调到 {pool}，新增 /healthz 探针，日志改为结构化输出。回滚："
             "`helm rollback {service}` 回到上一个 revision。值班：{person}。"),
            ("Canary at {pct}% first. Promote only if p95 stays under {ms} ms for 30 minutes and Sentry "
             "shows no new error signatures. Depends on PR #{pr}.",
             "先放 {pct}% 金丝雀流量。p95 连续 30 分钟低于 {ms} ms 且 Sentry 没有新的错误签名才全量。"
             "依赖 PR #{pr}。"),
        ],
    },
    {
        "name": "ci", "weight": 9, "types": ["dev", "qa"],
        "fail": ["LOGIC", "TIMEOUT", "RESOURCE", "NETWORK"],
        "titles": [
            ("Fix red CI on {repo}: {test} failing", "修复 {repo} CI：{test} 失败"),
            ("CI for {repo} times out in the integration stage", "{repo} 的 CI 在集成测试阶段超时"),
            ("main is red after PR #{pr} ({test})", "PR #{pr} 合入后 main 变红（{test}）"),
        ],
        "descs": [
            ("Since {date} `{test}` on {repo} has failed {k} of the last {runs} runs. Log tail: "
             "`{ci_error}`. {person} suspects the Postgres service container is not ready when the tests "
             "start.",
             "{date} 起 {repo} 上的 `{test}` 最近 {runs} 次运行失败了 {k} 次，日志尾部：`{ci_error}`。"
             "{person} 怀疑测试开始时 Postgres 服务容器还没就绪。"),
            ("The GitHub Actions job for {repo} hits the {minutes}-minute limit because the pgvector "
             "extension is compiled on every run. Cache the image layer and split the suite into two shards.",
             "{repo} 的 GitHub Actions 任务超过 {minutes} 分钟上限，因为每次都重新编译 pgvector 扩展。"
             "需要缓存镜像层，并把测试拆成两个分片。"),
            ("Bisected to PR #{pr}: it changed fixture ordering, so `{test}` reads rows left by another "
             "test. Either revert or make the fixture create its own owner_id.",
             "二分定位到 PR #{pr}：它改变了 fixture 顺序，`{test}` 读到了别的测试留下的数据。要么回滚，"
             "要么让 fixture 使用独立的 owner_id。"),
        ],
    },
    {
        "name": "auth", "weight": 7, "types": ["dev"], "fail": ["AUTH"],
        "titles": [
            ("Handle expired access tokens in the {provider} client of {agent}",
             "{agent} 的 {provider} 客户端处理访问令牌过期"),
            ("401s from {provider} after the {date} credential rotation",
             "{date} 凭证轮换后 {provider} 持续返回 401"),
            ("Refresh-token flow broken for {agent}", "{agent} 的刷新令牌流程失效"),
        ],
        "descs": [
            ("{agent} keeps using the cached token after it expires (TTL {minutes} min), so every call "
             "returns `401 Unauthorized: token expired`. Refresh 60 s before expiry and retry once on 401.",
             "{agent} 在令牌过期（TTL {minutes} 分钟）后仍使用缓存的令牌，每次调用都返回 `401 Unauthorized: "
             "token expired`。改为过期前 60 秒刷新，遇到 401 只重试一次。"),
            ("After {person} rotated the {provider} credentials on {date}, {n} jobs failed with 401. Vault "
             "has the new secret but running pods still hold the old env var; add a reload hook.",
             "{person} 在 {date} 轮换了 {provider} 凭证后，{n} 个任务报 401。Vault 中已是新密钥，"
             "但运行中的 Pod 仍持有旧环境变量，需要加重载钩子。"),
            ("The refresh call returns `invalid_grant` because rotation is on and another worker already "
             "used the refresh token. Persist the new refresh token atomically and serialize refreshes.",
             "刷新请求返回 `invalid_grant`：开启了令牌轮换，而另一个 worker 已经用过这个 refresh token。"
             "需要原子化保存新的 refresh token，并串行化刷新。"),
        ],
    },
    {
        "name": "oauth", "weight": 5, "types": ["dev"], "fail": ["AUTH", "LOGIC"],
        "titles": [
            ("Add {provider} OAuth login to the web console", "Web 控制台接入 {provider} OAuth 登录"),
            ("OAuth callback loses the state parameter on {env} after {ver}",
             "{ver} 之后 {env} 环境 OAuth 回调丢失 state 参数"),
            ("Request the {scope} scope for the {agent} GitHub App",
             "为 {agent} 的 GitHub App 申请 {scope} 权限"),
        ],
        "descs": [
            ("Implement the authorization-code flow with PKCE. The redirect URI has to be registered for "
             "{env} first; {person} owns the app registration.",
             "实现带 PKCE 的授权码流程。{env} 的回调地址需要先注册，应用注册由 {person} 负责。"),
            ("{n} users on {env} land back on /login with `state mismatch`. The state cookie is "
             "SameSite=Strict and gets dropped on the cross-site redirect; switch it to Lax and add a test.",
             "{env} 上有 {n} 位用户被重定向回 /login，并提示 `state mismatch`。"
             "state cookie 设置为 SameSite=Strict，跨站跳转时被丢弃；改成 Lax 并补测试。"),
            ("{agent} needs `{scope}` to open PRs; today it fails with `403 Forbidden: Resource not "
             "accessible by integration`. {person} has to approve the permission change in the org settings.",
             "{agent} 需要 `{scope}` 权限才能开 PR，目前报 `403 Forbidden: Resource not accessible by "
             "integration`。需要 {person} 在组织设置里批准权限变更。"),
        ],
    },
    {
        "name": "rate_limit", "weight": 7, "types": ["dev", "data"], "fail": ["RATE_LIMIT"],
        "titles": [
            ("Client-side throttling for {provider} calls in {service}",
             "{service} 对 {provider} 的调用加客户端限流"),
            ("429 storm from {provider} during the nightly {job}", "夜间 {job} 触发 {provider} 大量 429"),
            ("Make {service} honour Retry-After from {provider}",
             "{service} 调用 {provider} 时需要遵守 Retry-After"),
        ],
        "descs": [
            ("Per {person}: cap concurrency at {conc}, add jittered backoff and chart the remaining "
             "rate-limit headroom in Grafana.",
             "按 {person} 的建议：并发上限设为 {conc}，加入带抖动的退避，并在 Grafana 上画出剩余限流额度。"),
            ("We hit the {tpm} TPM limit around {hh}:00 every night when {job} overlaps with the eval run. "
             "Add a token bucket shared across workers (a Postgres advisory lock is enough).",
             "每晚 {hh} 点左右 {job} 与评测任务重叠时会打满 {tpm} TPM 限额。"
             "需要一个跨 worker 共享的令牌桶（用 Postgres advisory lock 就够了）。"),
            ("{n} requests got `HTTP 429 Too Many Requests` within {minutes} minutes. Our retry loop ignores "
             "Retry-After and retries immediately, which keeps us throttled.",
             "{minutes} 分钟内有 {n} 个请求收到 `HTTP 429 Too Many Requests`。"
             "我们的重试循环无视 Retry-After 立即重试，导致一直被限流。"),
        ],
    },
    {
        "name": "billing", "weight": 5, "types": ["data", "dev", "audit"], "fail": ["BILLING_CAP"],
        "titles": [
            ("{job} stopped: {provider} billing cap reached",
             "{provider} 账单上限触发，{job} 中断"),
            ("Spend guard before re-embedding {table}",
             "重算 {table} 向量前增加费用保护"),
            ("Raise the monthly {provider} cap from ${cap} to ${cap2}",
             "把 {provider} 月度额度从 ${cap} 提到 ${cap2}"),
        ],
        "descs": [
            ("`insufficient_quota` after {rows} of {rows2} documents. The org hard limit is ${cap}/month and "
             "this re-embed alone costs about ${cost}. {person} to approve a one-off raise.",
             "处理到 {rows}/{rows2} 条文档时报 `insufficient_quota`。组织硬上限是每月 ${cap}，"
             "这次重算本身就要约 ${cost}。需要 {person} 批准临时提额。"),
            ("Estimate tokens before launching; refuse when projected spend is above {pct}% of the remaining "
             "budget. Emit one BILLING_CAP event instead of failing hundreds of tasks one by one.",
             "启动前先估算 token 用量，预计花费超过剩余预算的 {pct}% 就拒绝执行。发出一个 BILLING_CAP 事件，"
             "而不是让几百个任务逐个失败。"),
            ("Finance approved the raise on {date}. Update the limit in the provider console and in "
             "`budget.yaml`, then resume the paused jobs.",
             "财务在 {date} 批准了提额。需要同时更新供应商控制台和 `budget.yaml` 里的上限，"
             "然后恢复暂停的任务。"),
        ],
    },
    {
        "name": "network", "weight": 6, "types": ["dev"], "fail": ["NETWORK", "TIMEOUT"],
        "titles": [
            ("Intermittent connection resets between {service} and {service2}",
             "{service} 与 {service2} 之间偶发连接重置"),
            ("DNS resolution failures for {service}.internal", "{service}.internal 域名解析失败"),
            ("TLS handshake errors when calling {provider}", "调用 {provider} 时 TLS 握手出错"),
        ],
        "descs": [
            ("`ConnectionResetError: [Errno 104]` about {n} times an hour since the node pool upgrade on "
             "{date}. Suspect idle keep-alive connections being dropped by the NAT after 350 s.",
             "{date} 节点池升级后，每小时约出现 {n} 次 `ConnectionResetError: [Errno 104]`。"
             "怀疑空闲 keep-alive 连接在 350 秒后被 NAT 回收。"),
            ("CoreDNS pods were CPU-throttled and {service} logged `getaddrinfo EAI_AGAIN`. Set ndots:2 and "
             "deploy NodeLocal DNSCache.",
             "CoreDNS Pod 被 CPU 限流，{service} 日志出现 `getaddrinfo EAI_AGAIN`。"
             "设置 ndots:2 并部署 NodeLocal DNSCache。"),
            ("Calls from {service} fail with `ssl.SSLError: EOF occurred in violation of protocol` whenever "
             "the egress proxy recycles. Retry idempotent calls only, and log the proxy instance id.",
             "{service} 每次在出口代理回收时都会出现 `ssl.SSLError: EOF occurred in violation of protocol`。"
             "只对幂等请求重试，并记录代理实例 ID。"),
        ],
    },
    {
        "name": "timeout", "weight": 6, "types": ["dev", "research", "data"], "fail": ["TIMEOUT"],
        "titles": [
            ("{service}: query on {table} exceeds statement_timeout",
             "{service}：{table} 上的查询超过 statement_timeout"),
            ("{agent} step times out at {sec}s on long documents", "{agent} 处理长文档时在 {sec} 秒超时"),
            ("Tune HTTP client timeouts in {service}", "调整 {service} 的 HTTP 客户端超时"),
        ],
        "descs": [
            ("`canceling statement due to statement timeout` on the top-k query over {table} ({rows} rows). "
             "EXPLAIN shows a sequential scan because the owner_id filter runs before the index. {person} is "
             "looking at a partial index.",
             "{table}（{rows} 行）上的 top-k 查询报 `canceling statement due to statement timeout`。"
             "EXPLAIN 显示是全表扫描，因为 owner_id 过滤先于索引执行。{person} 在看部分索引方案。"),
            ("Documents over 40 pages make the summarize step of {agent} run longer than {sec}s and the "
             "worker kills it. Chunk first, summarize per chunk, then merge.",
             "超过 40 页的文档会让 {agent} 的摘要步骤运行超过 {sec} 秒，被 worker 强制终止。先分块，"
             "逐块摘要后再合并。"),
            ("The client uses the default timeout of None, so a stuck upstream holds a worker forever. Set "
             "connect={retries}s, read={sec}s and add a total deadline per task.",
             "客户端用的是默认的 None 超时，上游卡住时 worker 会被永久占用。设置 connect={retries} 秒、"
             "read={sec} 秒，并为每个任务加总时限。"),
        ],
    },
    {
        "name": "migration", "weight": 6, "types": ["dev", "data"], "fail": ["DATA", "LOGIC", "TIMEOUT"],
        "titles": [
            ("Migration {migration}: add owner_id to {table}", "迁移 {migration}：{table} 增加 owner_id"),
            ("Backfill owner_id before adding NOT NULL on {table}",
             "{table} 加 NOT NULL 约束前先回填 owner_id"),
            ("Migration {migration} holds an ACCESS EXCLUSIVE lock too long",
             "迁移 {migration} 持有 ACCESS EXCLUSIVE 锁时间过长"),
        ],
        "descs": [
            ("Add the column as nullable, backfill in batches of 10k, then SET NOT NULL using a validated "
             "CHECK constraint so the table is not rewritten. {person} reviews the SQL.",
             "先加可空列，按每批 1 万行回填，再借助已验证的 CHECK 约束执行 SET NOT NULL，避免重写整表。"
             "SQL 由 {person} 评审。"),
            ("{rows} rows in {table} still have owner_id NULL; most come from the import on {date}. Map them "
             "via the tasks table and flag the remainder for manual review.",
             "{table} 仍有 {rows} 行 owner_id 为空，大部分来自 {date} 的导入。通过 tasks 表映射，"
             "其余的标记为人工复核。"),
            ("On {env} the migration waited {minutes} minutes behind a long-running analytics query and "
             "blocked all writes. Set lock_timeout = '5s' and retry the migration in a loop.",
             "在 {env} 上迁移排在一个长时间运行的分析查询后面等了 {minutes} 分钟，期间阻塞了所有写入。"
             "设置 lock_timeout = '5s' 并循环重试迁移。"),
        ],
    },
    {
        "name": "pgvector", "weight": 6, "types": ["dev", "research"],
        "fail": ["RESOURCE", "TIMEOUT", "DATA"],
        "titles": [
            ("Build an HNSW index on {table}.embedding ({rows} rows)",
             "在 {table}.embedding 上建 HNSW 索引（{rows} 行）"),
            ("Recall on {table} dropped after moving to IVFFlat (lists={lists})",
             "{table} 改用 IVFFlat（lists={lists}）后召回率下降"),
            ("Tune hnsw.ef_search for {service}",
             "为 {service} 调 hnsw.ef_search"),
        ],
        "descs": [
            ("{rows} vectors of dimension {dim}. Build with m=16, ef_construction=64 and "
             "maintenance_work_mem = 2GB, CONCURRENTLY so writes keep flowing. Expect about {minutes} "
             "minutes.",
             "共 {rows} 条 {dim} 维向量。使用 m=16、ef_construction=64，maintenance_work_mem 设为 2GB，"
             "并用 CONCURRENTLY 构建以免阻塞写入，预计约 {minutes} 分钟。"),
            ("recall@10 went from 0.96 to 0.{pct2} on the eval set after the switch. probes is still 1; try "
             "probes=10 and re-run the benchmark before reverting.",
             "切换后评测集上的 recall@10 从 0.96 掉到 0.{pct2}。probes 还是默认的 1，"
             "先试 probes=10 并重跑基准，再决定是否回退。"),
            ("p95 is {ms} ms at ef_search=40. Sweep 20/40/80/160, record recall and latency, and pick the "
             "smallest value with recall above 0.95.",
             "ef_search=40 时 p95 为 {ms} ms。扫描 20/40/80/160 四档，记录召回率和延迟，"
             "选召回率高于 0.95 的最小值。"),
        ],
    },
    {
        "name": "memleak", "weight": 5, "types": ["dev"], "fail": ["RESOURCE"],
        "titles": [
            ("Memory leak in {service}: RSS grows {mb} MB per day",
             "{service} 内存泄漏：RSS 每天增长 {mb} MB"),
            ("{service} pods OOMKilled every ~{hours}h", "{service} Pod 大约每 {hours} 小时被 OOMKilled"),
            ("Profile heap usage of the {agent} worker on {env}",
             "分析 {env} 上 {agent} worker 的堆内存"),
        ],
        "descs": [
            ("Grafana shows the RSS of {service} climbing steadily until the pod hits its {mb}Mi limit. "
             "tracemalloc points at the per-request embedding cache, which is a dict with no eviction.",
             "Grafana 上 {service} 的 RSS 持续上升，直到 Pod 达到 {mb}Mi 上限。"
             "tracemalloc 指向按请求缓存 embedding 的字典，没有任何淘汰策略。"),
            ("Exit code 137, limit {mb}Mi. It started after PR #{pr} added response logging; the logger "
             "keeps references to full response bodies.",
             "退出码 137，内存上限 {mb}Mi。问题从 PR #{pr} 加入响应日志后开始出现，"
             "日志对象一直持有完整的响应体引用。"),
            ("Run memray on a staging worker for {hours} hours with production-like traffic and attach the "
             "flame graph. {person} suspects the httpx client created per task.",
             "在 staging worker 上用类似生产的流量跑 {hours} 小时 memray，并附上火焰图。"
             "{person} 怀疑是每个任务都新建 httpx client。"),
        ],
    },
    {
        "name": "flaky", "weight": 6, "types": ["qa"], "fail": ["LOGIC", "TIMEOUT"],
        "titles": [
            ("Quarantine flaky test {test} ({repo})",
             "隔离不稳定测试 {test}（{repo}）"),
            ("{test} fails only under pytest-xdist in {repo}",
             "{repo} 的 {test} 只在 pytest-xdist 并行时失败"),
            ("{test} in {repo} depends on the wall clock",
             "{repo} 的 {test} 依赖系统时间"),
        ],
        "descs": [
            ("`{test}` failed {k} of {runs} runs this week with no code change. Mark it with "
             "@pytest.mark.quarantine, open a follow-up and assign {person}.",
             "本周在代码无改动的情况下 `{test}` 在 {runs} 次运行中失败 {k} 次。"
             "先加 @pytest.mark.quarantine 隔离，再开后续任务交给 {person}。"),
            ("In `{test}` two workers share the same owner_id fixture and delete each other's rows. Generate "
             "a unique owner per test session.",
             "`{test}` 里两个 worker 共用同一个 owner_id fixture，互相删除对方的数据。"
             "改为每个测试会话生成唯一的 owner。"),
            ("`{test}` asserts on `age_days` computed from datetime.now() and has broken {k} times around "
             "midnight UTC. Freeze time or inject a clock.",
             "`{test}` 断言基于 datetime.now() 计算的 `age_days`，在 UTC 零点附近已经失败了 {k} 次。"
             "需要冻结时间或注入时钟。"),
        ],
    },
    {
        "name": "review", "mix": True, "weight": 10, "types": ["review"], "fail": ["LOGIC"],
        "titles": [
            ("Review PR #{pr}: {change}", "评审 PR #{pr}：{change}"),
            ("Second review for PR #{pr} in {repo}", "{repo} PR #{pr} 二次评审"),
            ("Security review of PR #{pr} ({change})", "PR #{pr} 安全评审（{change}）"),
        ],
        "descs": [
            ("{person} requested changes: no test for the empty-result path, and the SQL filter is built "
             "with f-strings. Re-review once both are fixed.",
             "{person} 要求修改：空结果分支没有测试，SQL 过滤条件用 f-string 拼接。两处修好后再评审。"),
            ("Approved with {n} nits, mostly naming. One real issue: the transaction is never committed or "
             "rolled back when the loop raises halfway.",
             "批准，附 {n} 条小意见，多数是命名问题。真正的问题只有一个："
             "循环中途抛异常时事务既没有提交也没有回滚。"),
            ("The diff is {loc} lines across {files} files; asked the author to split it. The migration "
             "should land first, then the code that reads the new column.",
             "改动共 {loc} 行、涉及 {files} 个文件，已要求作者拆分。迁移先合入，读取新列的代码后合。"),
        ],
    },
    {
        "name": "backfill", "weight": 7, "types": ["data"],
        "fail": ["DATA", "TIMEOUT", "RESOURCE", "BILLING_CAP"],
        "titles": [
            ("Backfill embeddings for {table} ({rows} rows)", "回填 {table} 的向量（{rows} 行）"),
            ("Re-run {job} for the partition of {date}", "重跑 {date} 分区的 {job}"),
            ("{job} backfill stuck at batch {n}",
             "{job} 回填卡在第 {n} 批"),
        ],
        "descs": [
            ("Use the new model (dim {dim}), batches of 64, and checkpoint the last processed id in "
             "`backfill_state` so the job can resume. Estimated cost ${cost}.",
             "使用新模型（{dim} 维），每批 64 条，把最后处理的 id 记录到 `backfill_state`，方便断点续跑。"
             "预计花费 ${cost}。"),
            ("The upstream export for {date} arrived {hours} hours late, so {job} ran on an empty partition "
             "and the dashboard showed zero. Re-run after verifying row counts.",
             "{date} 的上游导出晚到了 {hours} 小时，{job} 跑在空分区上，看板显示为 0。确认行数后重跑。"),
            ("Batch {n} contains rows with NULL content and the job crashes instead of skipping them. Add "
             "validation, write rejects to a dead-letter table, and continue.",
             "第 {n} 批里有 content 为 NULL 的行，任务直接崩溃而不是跳过。加上校验，"
             "把异常数据写入死信表后继续。"),
        ],
    },
    {
        "name": "talk", "weight": 7, "types": ["talk"], "fail": ["TIMEOUT", "RATE_LIMIT", "LOGIC"],
        "titles": [
            ("Reply to {customer} about the export delayed since {date}",
             "回复 {customer}：{date} 起报表导出延迟"),
            ("Onboarding call with {customer} on {date}: memory retention",
             "{date} 与 {customer} 的接入沟通：记忆保留策略"),
            ("Follow up with {customer} on 429 errors from {service}",
             "跟进 {customer} 在 {service} 上遇到的 429 错误"),
        ],
        "descs": [
            ("{customer} says the weekly export has been {hours} hours late since {date}. Explain the root "
             "cause (upstream partition delay), give the new ETA and offer a manual export today.",
             "{customer} 反馈周报导出从 {date} 起晚了 {hours} 小时。需要解释根因（上游分区延迟），"
             "给出新的预计时间，并提供今天手动导出。"),
            ("{customer} asked how long raw events are kept and whether learnings can be deleted per user. "
             "Answer: events 30 days, learnings until deleted; per-owner deletion is supported via the API.",
             "{customer} 询问原始事件保存多久、能否按用户删除经验条目。答复：事件保留 30 天，"
             "经验条目保留到手动删除；支持通过 API 按 owner 删除。"),
            ("{customer} hit 429s on {n} requests yesterday. Confirm their plan limit ({tpm} TPM), share the "
             "Retry-After guidance, and check with {person} whether we can raise it temporarily.",
             "{customer} 昨天有 {n} 个请求收到 429。确认其套餐额度（{tpm} TPM），发送 Retry-After 使用说明，"
             "并与 {person} 确认能否临时提额。"),
        ],
    },
    {
        "name": "audit", "weight": 5, "types": ["audit"], "fail": ["AUTH", "DATA"],
        "titles": [
            ("Audit {service} access logs for the week of {date}",
             "审计 {service} 在 {date} 那一周的访问日志"),
            ("Q{q} dependency license audit for {repo}",
             "{repo} Q{q} 依赖许可证审计"),
            ("Verify owner isolation in {service} search",
             "验证 {service} 检索的 owner 隔离"),
        ],
        "descs": [
            ("Look for service tokens used from unexpected IPs and for admin endpoints called by agents. {n} "
             "suspicious entries last time, all explained by the CI runner.",
             "检查是否有服务令牌从异常 IP 使用、是否有 agent 调用了管理接口。上次发现 {n} 条可疑记录，"
             "全部来自 CI runner。"),
            ("Run pip-licenses on {repo} and flag anything GPL/AGPL. Last quarter we replaced one AGPL "
             "dependency; make sure it did not come back transitively.",
             "对 {repo} 运行 pip-licenses，标记所有 GPL/AGPL 依赖。上季度替换过一个 AGPL 依赖，"
             "确认它没有通过间接依赖回来。"),
            ("Seed two owners with overlapping content, query as each, and assert zero cross-owner rows in "
             "vector, full-text and hybrid search. {person} wants the report this week.",
             "构造两个内容重叠的 owner，分别以各自身份查询，断言向量、全文和混合检索都没有跨 owner 的结果。"
             "{person} 希望本周内拿到报告。"),
        ],
    },
    {
        "name": "research", "weight": 6, "types": ["research"], "fail": ["TIMEOUT", "RESOURCE"],
        "titles": [
            ("Evaluate {tech} for {purpose}", "评估 {tech} 用于{purpose}"),
            ("Benchmark hybrid search (BM25 + vector) on the {customer} support corpus",
             "在 {customer} 客服语料上评测混合检索（BM25 + 向量）"),
            ("Compare chunk sizes 256/512/1024 for recall@10 on {table}",
             "在 {table} 上对比 256/512/1024 分块大小的 recall@10"),
        ],
        "descs": [
            ("Question from {person}: is it worth it at {rows} chunks? Measure recall@10, p95 latency and "
             "index size against the current setup and write it up in the wiki.",
             "{person} 的问题：在 {rows} 个分块的规模下是否值得？对比当前方案的 recall@10、"
             "p95 延迟和索引大小，结果写到 wiki。"),
            ("Use the 300 labelled queries from the {customer} support corpus. Report nDCG@10 for BM25 only, "
             "vector only, and RRF with k=60. Chinese queries need a proper tokenizer, not the simple "
             "config.",
             "使用 {customer} 客服语料里 300 条已标注查询，分别报告纯 BM25、纯向量和 k=60 的 RRF 的 nDCG@10。"
             "中文查询需要合适的分词器，不能用 simple 配置。"),
            ("Test 0/50/100 token overlap too. Last time 512 with 50 overlap won by {pct} points, but the "
             "eval set was English only.",
             "同时测试 0/50/100 token 的重叠。上次 512 + 50 重叠领先 {pct} 个点，但当时评测集只有英文。"),
        ],
    },
    {
        "name": "okr", "weight": 4, "types": ["research", "talk"], "fail": ["LOGIC"],
        "titles": [
            ("Draft Q{q} OKRs for {project_name}", "起草 {project_name} 的 Q{q} OKR"),
            ("OKR check-in {date}: {kr}",
             "{date} OKR 进展同步：{kr}"),
            ("Collect metrics for the {project_name} Q{q} review",
             "为 {project_name} Q{q} 复盘收集指标"),
        ],
        "descs": [
            ("Three objectives max. {person} suggested keeping the latency KR from last quarter since we "
             "only reached {pct2}% of it.",
             "目标最多三个。{person} 建议保留上季度的延迟 KR，因为只完成了 {pct2}%。"),
            ("Status is on track or at risk. Numbers come from Grafana as of {date}; blockers go in the "
             "notes, not only in Slack.",
             "状态分为正常和有风险。数据以 {date} 的 Grafana 为准；阻塞项写在记录里，不要只发在 Slack。"),
            ("Pull failure counts per failure_class, median task duration and spend per 1k tasks. {person} "
             "will turn them into slides.",
             "按 failure_class 汇总失败数，统计任务耗时中位数和每千任务花费，{person} 会做成幻灯片。"),
        ],
    },
]

STATUS_WEIGHTS = {"completed": 46, "in_progress": 14, "pending": 16, "failed": 16, "cancelled": 8}
STATUS_NOTES: dict[str, list[Pair]] = {
    "completed": [
        ("Done: merged in PR #{pr}.", "已完成：PR #{pr} 已合入。"),
        ("Verified on {env} by {person2}.", "{person2} 已在 {env} 上验证。"),
    ],
    "in_progress": [
        ("{person2} is on it.", "{person2} 正在处理。"),
        ("Draft PR #{pr} is up.", "草稿 PR #{pr} 已提交。"),
    ],
    "pending": [("Waiting for {person2} to confirm priority.", "等待 {person2} 确认优先级。")],
    "cancelled": [
        ("Cancelled: superseded by the newer plan.", "已取消：被新的方案取代。"),
        ("Closed as won't fix after discussion with {person2}.", "与 {person2} 讨论后决定不修复，关闭。"),
    ],
}
FAILED_NOTE: Pair = ("Last attempt failed: `{error}`.", "最近一次执行失败：`{error}`。")
DUP_TITLE_SUFFIX: list[Pair] = [
    ("", ""), (" (again)", "（再次出现）"), (" - still happening", "（仍未解决）"),
]
DUP_DESC_NOTE: Pair = (
    "Re-filed by {person2}: seeing this again on {env}.", "{person2} 重新提交：{env} 上又出现了。",
)

# --------------------------------------------------------------------------------------------------
# Learnings: t = title, c = content, both (English, Chinese) translations of each other
# --------------------------------------------------------------------------------------------------

LEARNING_TEMPLATES: dict[str, dict[str, Any]] = {
    "auth_expired": {
        "fc": "AUTH", "cat": "failure_pattern", "types": ["dev", "data", "talk"],
        "trig": ["task_failed", "systemic_failure"],
        "t": ("Auth error: expired token causes 401 from {provider}",
              "认证失败：令牌过期导致 {provider} 返回 401"),
        "c": ("{agent} failed {n} tasks in a row with `401 Unauthorized: token expired` against {provider}. "
              "The access token had a {minutes}-minute TTL but was only refreshed at process start. This is "
              "an AUTH failure, not a transient one: refresh 60 s before expiry and retry at most once after "
              "a 401.",
              "{agent} 调用 {provider} 时连续 {n} 个任务返回 `401 Unauthorized: token expired`。"
              "访问令牌的 TTL 只有 {minutes} 分钟，却只在进程启动时刷新一次。这是认证失败（AUTH），"
              "不是瞬时错误：应在过期前 60 秒主动刷新，收到 401 后最多重试一次。"),
    },
    "auth_refresh_reuse": {
        "fc": "AUTH", "cat": "failure_pattern", "types": ["dev", "data"],
        "trig": ["task_failed", "rca_request"],
        "t": ("OAuth refresh token reuse returns invalid_grant",
              "OAuth 刷新令牌被重复使用返回 invalid_grant"),
        "c": ("With refresh-token rotation enabled, two workers refreshing at the same time means the second "
              "gets `invalid_grant` and the session is dead. We lost {n} scheduled runs on {date} this way. "
              "Serialize refreshes behind a row lock and persist the new token in the same transaction; "
              "treat invalid_grant as an AUTH failure that needs a human to re-consent.",
              "开启刷新令牌轮换后，两个 worker 同时刷新时，后一个会拿到 `invalid_grant`，会话随即失效。"
              "{date} 因此丢了 {n} 次定时运行。刷新操作要用行锁串行化，新令牌在同一事务中持久化；"
              "invalid_grant 属于认证失败（AUTH），需要人工重新授权。"),
    },
    "auth_scope_403": {
        "fc": "AUTH", "cat": "failure_pattern", "types": ["dev", "review", "audit"],
        "trig": ["task_failed", "escalation"],
        "t": ("403 after a permission change is an auth problem, not a code bug",
              "权限变更后的 403 是认证问题而不是代码缺陷"),
        "c": ("When {agent} started getting `403 Forbidden: Resource not accessible by integration`, two "
              "people spent a day debugging the client. The real cause was that the GitHub App lost the "
              "`{scope}` scope after an org policy change on {date}. Check granted scopes first whenever an "
              "AUTH error appears right after an admin change.",
              "{agent} 开始报 `403 Forbidden: Resource not accessible by integration` 时，"
              "两个人花了一整天排查客户端代码。真正原因是 {date} 组织策略变更后 GitHub App 丢失了 `{scope}` "
              "权限。凡是在管理员变更之后立刻出现的认证错误（AUTH），先检查已授予的权限范围。"),
    },
    "auth_reload": {
        "fc": "AUTH", "cat": "best_practice", "types": ["dev", "audit"], "trig": [None, "rca_request"],
        "t": ("Rotated {provider} secrets need a pod reload hook", "{provider} 密钥轮换后需要 Pod 重载钩子"),
              "c": ("Updating the secret in Vault does not change environment variables of running pods. "
                    "After the {provider} rotation, {n} jobs kept failing with 401 until someone restarted "
                    "the deployment. Use a reloader annotation or read the credential from a mounted file on "
                    "each call, and alert on any AUTH error spike within an hour of a rotation.",
              "在 Vault 中更新密钥并不会改变运行中 Pod 的环境变量。{provider} 凭证轮换后，"
              "{n} 个任务一直报 401，直到有人重启了 deployment。应使用 reloader 注解，"
              "或每次调用时从挂载文件读取凭证，并在轮换后一小时内对认证错误（AUTH）激增设置告警。"),
    },
    "rl_retry_after": {
        "fc": "RATE_LIMIT", "cat": "failure_pattern", "types": ["dev", "data", "talk"],
        "trig": ["task_failed", "systemic_failure", "alert"],
        "t": ("Rate limit 429 from {provider}: honour Retry-After",
              "限流 429：调用 {provider} 必须遵守 Retry-After"),
        "c": ("During the nightly {job}, {n} calls to {provider} returned `HTTP 429 Too Many Requests` "
              "within {minutes} minutes. Our retry loop ignored the Retry-After header and retried "
              "immediately, so we stayed rate limited far longer than needed. Always sleep for Retry-After "
              "plus jitter, and count RATE_LIMIT failures separately from real errors.",
              "夜间 {job} 运行期间，{minutes} 分钟内有 {n} 次调用 {provider} 返回 `HTTP 429 Too Many "
              "Requests`。重试循环无视 Retry-After 头立即重试，导致被限流的时间远超必要。"
              "必须按 Retry-After（再加抖动）等待，并把限流失败（RATE_LIMIT）与真正的错误分开统计。"),
    },
    "rl_shared_bucket": {
        "fc": "RATE_LIMIT", "cat": "optimization", "types": ["dev", "data"], "trig": [None, "rca_request"],
        "t": ("Share one token bucket across all {conc} workers", "{conc} 个 worker 共享同一个令牌桶"),
              "c": (
        "Each of our {conc} workers had its own limiter, so together they sent {conc}x the allowed rate and "
        "hit the {tpm} TPM rate limit every night. A single token bucket in Postgres (one row, updated with "
        "SELECT FOR UPDATE) fixed it with negligible overhead. RATE_LIMIT failures dropped from about {n} "
        "per night to zero.",
              "{conc} 个 worker 各自维护限流器，合起来的请求速率是允许值的 {conc} 倍，"
              "每晚都会触发 {tpm} TPM 的限流。改为在 Postgres 中放一个共享令牌桶（单行，"
              "用 SELECT FOR UPDATE 更新）后问题解决，开销可以忽略。RATE_LIMIT 失败从每晚约 {n} 次降到 0。"),
    },
    "rl_github_secondary": {
        "fc": "RATE_LIMIT", "cat": "failure_pattern", "types": ["review", "dev", "qa"],
        "trig": ["task_failed", "alert"],
        "t": ("GitHub secondary rate limit when posting review comments on PR #{pr}",
              "GitHub 二级限流：在 PR #{pr} 上批量发评审评论被拦截"),
        "c": ("{agent} posted {n} inline comments in a burst on PR #{pr} and GitHub answered with a "
              "secondary rate limit (403 with a `retry-after` header). Batch comments into a single review "
              "via the pull request reviews API instead. Treat this as RATE_LIMIT, not AUTH, even though the "
              "status code is 403.",
              "{agent} 在 PR #{pr} 上瞬间发了 {n} 条行内评论，GitHub 返回了二级限流（带 `retry-after` 头的 "
              "403）。应改用 pull request reviews 接口把评论合并成一次评审提交。虽然状态码是 403，"
              "这属于限流（RATE_LIMIT）而不是认证问题。"),
    },
    "rl_stagger": {
        "fc": "RATE_LIMIT", "cat": "best_practice", "types": ["data", "research"], "trig": [None, "alert"],
        "t": ("Stagger nightly jobs to stay under the {provider} TPM limit",
              "错开夜间任务，避免打满 {provider} 的 TPM 限额"),
        "c": ("{job} and the eval run both started at {hh}:00 and competed for the same {provider} rate "
              "limit. Moving the eval run by 90 minutes removed every 429 without any code change. Keep a "
              "shared calendar of heavy jobs per provider key.",
              "{job} 和评测任务都在 {hh}:00 启动，争抢同一个 {provider} 的限流额度（RATE_LIMIT）。"
              "把评测任务推后 90 分钟后，429 全部消失，没有改任何代码。"
              "应按供应商 key 维护一份重任务的排期表。"),
    },
    "bc_stop_all": {
        "fc": "BILLING_CAP", "cat": "failure_pattern", "types": ["data", "dev"],
        "trig": ["systemic_failure", "task_failed", "escalation"],
        "t": ("Billing cap reached stops all {provider} work at once",
              "账单上限触发后所有 {provider} 任务同时停止"),
        "c": ("On {date} the org hit its ${cap} monthly billing cap and every call to {provider} started "
              "returning `insufficient_quota`. {n} tasks failed within minutes and the retry policy made the "
              "queue even longer. A BILLING_CAP error is not retryable: pause the queue, raise one "
              "escalation to {person}, and resume only after the cap is raised.",
              "{date} 组织触达每月 ${cap} 的账单上限，所有对 {provider} 的调用都开始返回 "
              "`insufficient_quota`。几分钟内 {n} 个任务失败，重试策略又让队列越积越长。"
              "账单上限错误（BILLING_CAP）不可重试：应暂停队列，向 {person} 发起一次升级，"
              "等额度提高后再恢复。"),
    },
    "bc_estimate": {
        "fc": "BILLING_CAP", "cat": "best_practice", "types": ["data", "audit"],
        "trig": [None, "rca_request"],
        "t": ("Estimate spend before launching batch jobs", "批量任务启动前先估算费用"),
              "c": ("The re-embedding of {rows} chunks was estimated at ${cost} only after it had already "
                    "consumed most of the budget. A dry run that counts tokens takes about a minute and "
                    "would have shown the job could not fit under the billing cap. Require the estimate in "
                    "the task description for any batch above 100k items.",
              "{rows} 个分块的向量重算，直到预算快被用完时才估算出需要 ${cost}。"
              "先做一次只统计 token 的预演大约只需一分钟，就能看出任务会超出账单上限（BILLING_CAP）。"
              "凡是超过 10 万条的批量任务，任务描述里必须附上费用估算。"),
    },
    "bc_402_mapping": {
        "fc": "BILLING_CAP", "cat": "failure_pattern", "types": ["dev", "talk"],
        "trig": ["task_failed", "alert"],
        "t": ("402 from {provider} was retried like a flaky upstream error",
              "{provider} 返回的 402 被当成偶发上游错误重试"),
        "c": ("Our HTTP wrapper mapped every non-2xx response to a generic `UpstreamError`, so a 402 from "
              "{provider} was retried {retries} times and reported as flaky. Map 402 and "
              "`insufficient_quota` explicitly to BILLING_CAP so the router stops sending work to that "
              "provider.",
              "我们的 HTTP 封装把所有非 2xx 响应都映射成通用的 `UpstreamError`，"
              "于是 {provider} 的 402 被重试了 {retries} 次，还被当成偶发问题上报。"
              "应把 402 和 `insufficient_quota` 明确映射为 BILLING_CAP（账单上限），"
              "让路由停止向该供应商派发任务。"),
    },
    "net_nat_reset": {
        "fc": "NETWORK", "cat": "failure_pattern", "types": ["dev", "data"],
        "trig": ["task_failed", "alert", "systemic_failure"],
        "t": ("Idle keep-alive connections to {service2} reset by the NAT",
              "到 {service2} 的空闲长连接被 NAT 回收导致连接重置"),
        "c": ("After the node pool upgrade, calls from {service} to {service2} failed with "
              "`ConnectionResetError: [Errno 104]` about {n} times an hour. The cloud NAT drops idle "
              "connections after 350 s while our pool kept them for 600 s. Setting the pool's idle timeout "
              "to 300 s removed the NETWORK errors completely.",
              "节点池升级后，{service} 调用 {service2} 每小时约有 {n} 次 `ConnectionResetError: [Errno "
              "104]`。云 NAT 会在 350 秒后回收空闲连接，而我们的连接池会保留 600 秒。"
              "把连接池空闲超时改为 300 秒后，这类网络错误（NETWORK）彻底消失。"),
    },
    "net_dns": {
        "fc": "NETWORK", "cat": "failure_pattern", "types": ["dev"], "trig": ["alert", "systemic_failure"],
        "t": ("DNS EAI_AGAIN in {service} when CoreDNS is throttled",
              "CoreDNS 被限流时 {service} 出现 DNS EAI_AGAIN"),
        "c": ("Bursts of `getaddrinfo EAI_AGAIN` in {service} lined up exactly with CPU throttling on the "
              "CoreDNS pods. With the default ndots:5, every lookup of an external host generated five "
              "queries. Lowering ndots and adding NodeLocal DNSCache cut DNS traffic by about 80% and the "
              "NETWORK alerts stopped.",
              "{service} 中成批出现的 `getaddrinfo EAI_AGAIN` 与 CoreDNS Pod 的 CPU 限流时间完全吻合。"
              "默认 ndots:5 时，每次解析外部域名都会产生五次查询。调低 ndots 并部署 NodeLocal DNSCache 后，"
              "DNS 流量下降约 80%，网络告警（NETWORK）随之消失。"),
    },
    "net_idempotent": {
        "fc": "NETWORK", "cat": "best_practice", "types": ["dev", "data", "talk"],
        "trig": [None, "rca_request"],
        "t": ("Only retry idempotent calls on network errors", "网络错误只重试幂等请求"),
              "c": (
        "A connection reset while sending a webhook does not tell you whether the receiver processed it. We "
        "retried blindly and {customer} received {n} duplicate notifications on {date}. Retry NETWORK errors "
        "only for idempotent requests or when the request carries an idempotency key.",
              "发送 webhook 时遇到连接重置，并不能说明对方是否已经处理。我们盲目重试，"
              "结果 {date} {customer} 收到了 {n} 条重复通知。网络错误（NETWORK）只对幂等请求，"
              "或带幂等键的请求进行重试。"),
    },
    "to_backoff": {
        "fc": "TIMEOUT", "cat": "best_practice", "types": ["dev", "data", "research"],
        "trig": ["task_failed", "rca_request", None],
        "t": ("Timeout retry needs exponential backoff with jitter", "超时重试：使用指数退避并加抖动"),
              "c": (
        "When {service2} slowed down on {date}, every worker retried its timed-out call after exactly 1 s, "
        "so the retries arrived in synchronized waves and kept the service overloaded. Exponential backoff "
        "(base 0.5 s, factor 2, cap 30 s) with full jitter spread the load out. Cap attempts at {retries} "
        "and classify the final failure as TIMEOUT.",
              "{date} {service2} 变慢时，所有 worker 在超时后都恰好等 1 秒重试，重试请求形成同步的波峰，"
              "使服务持续过载。改为带完全抖动的指数退避（基数 0.5 秒、倍数 2、上限 30 秒）后负载被打散。"
              "重试次数上限设为 {retries}，最终失败归类为 TIMEOUT（超时）。"),
    },
    "to_statement": {
        "fc": "TIMEOUT", "cat": "failure_pattern", "types": ["dev", "data"], "trig": ["task_failed", "alert"],
        "t": ("Set statement_timeout per role, not globally", "按角色设置 statement_timeout，而不是全局设置"),
              "c": (
        "A global statement_timeout of {sec}s killed the nightly {job} and produced {n} TIMEOUT failures, "
        "while the API role really needs 2 s. Set `ALTER ROLE api SET statement_timeout = '2s'` and give the "
        "batch role its own, longer limit.",
              "全局 statement_timeout 设为 {sec} 秒，导致夜间 {job} 被杀掉，产生 {n} 个超时失败（TIMEOUT），"
              "而 API 角色其实只需要 2 秒。应执行 `ALTER ROLE api SET statement_timeout = '2s'`，"
              "批处理角色单独设置更长的上限。"),
    },
    "to_long_docs": {
        "fc": "TIMEOUT", "cat": "failure_pattern", "types": ["research", "talk", "dev"],
        "trig": ["task_failed", "escalation"],
        "t": ("Long documents exceed the {sec}s step timeout of {agent}",
              "长文档导致 {agent} 步骤超过 {sec} 秒超时"),
        "c": ("{agent} timed out on every document over about 40 pages because summarization ran as one "
              "call. Raising the timeout only moved the problem. Chunk first, summarize chunks in parallel "
              "and merge; the step now finishes in under {sec}s and the TIMEOUT failures are gone.",
              "{agent} 处理超过约 40 页的文档时都会超时，因为摘要是一次调用完成的。"
              "单纯调大超时只是把问题推后。改为先分块、并行摘要再合并后，该步骤在 {sec} 秒内完成，"
              "超时失败（TIMEOUT）不再出现。"),
    },
    "res_pool": {
        "fc": "RESOURCE", "cat": "failure_pattern", "types": ["dev", "data"],
        "trig": ["systemic_failure", "alert", "task_failed"],
        "t": ("Database connection pool exhausted under burst load", "突发流量下数据库连接池耗尽"),
              "c": (
        "At {hh}:00 on {date}, {n} tasks failed with `QueuePool limit of size {pool} overflow 0 reached, "
        "connection timed out`. Each agent opened its own pool and Postgres hit max_connections long before "
        "the CPU was busy. This is a RESOURCE failure: put PgBouncer in transaction mode in front of "
        "Postgres and size pools per process, not per agent.",
              "{date} {hh} 点，{n} 个任务报 `QueuePool limit of size {pool} overflow 0 reached, connection "
              "timed out`。每个 agent 都自建连接池，Postgres 在 CPU 还很空闲时就已经达到 max_connections。"
              "这是资源类失败（RESOURCE）：在 Postgres 前加事务模式的 PgBouncer，"
              "并按进程而不是按 agent 设置连接池大小。"),
    },
    "res_leak": {
        "fc": "RESOURCE", "cat": "failure_pattern", "types": ["dev"],
        "trig": ["alert", "task_failed", "rca_request"],
        "t": ("Memory leak from an unbounded in-process cache in {service}",
              "内存泄漏：{service} 的进程内缓存没有上限"),
        "c": ("RSS of {service} grew about {mb} MB per day until the pod was OOMKilled. tracemalloc showed a "
              "module-level dict caching embeddings per request text with no eviction. Replacing it with an "
              "LRU of 10k entries fixed the RESOURCE problem; always bound in-process caches.",
              "{service} 的 RSS 每天增长约 {mb} MB，直到 Pod 被 OOMKilled。"
              "tracemalloc 显示是一个模块级字典按请求文本缓存 embedding，没有任何淘汰。"
              "改为容量 1 万的 LRU 后资源问题（RESOURCE）解决；进程内缓存一定要设上限。"),
    },
    "res_hnsw_mem": {
        "fc": "RESOURCE", "cat": "optimization", "types": ["dev", "research", "data"],
        "trig": [None, "task_failed"],
        "t": ("HNSW index build on {table} needs enough maintenance_work_mem",
              "在 {table} 上构建 HNSW 索引需要足够的 maintenance_work_mem"),
        "c": ("Building the HNSW index on {rows} vectors with the default 64 MB maintenance_work_mem took "
              "over {hours} hours and spilled to disk. With 2 GB and max_parallel_maintenance_workers = 4 it "
              "finished in {minutes} minutes. Check free memory first: the build is a RESOURCE hog and can "
              "starve other queries.",
              "在 {rows} 条向量上用默认 64 MB 的 maintenance_work_mem 构建 HNSW 索引，"
              "花了超过 {hours} 小时并溢出到磁盘。改为 2 GB 并设置 max_parallel_maintenance_workers = 4 后，"
              "{minutes} 分钟就完成了。先确认空闲内存：索引构建非常消耗资源（RESOURCE），可能挤占其他查询。"),
    },
    "res_disk": {
        "fc": "RESOURCE", "cat": "failure_pattern", "types": ["qa", "dev"], "trig": ["task_failed", "alert"],
        "t": ("CI runner disk full from cached docker layers", "CI 机器磁盘被缓存的 docker 镜像层占满"),
              "c": (
        "The self-hosted runner failed {n} jobs with `No space left on device` because every pgvector image "
        "build left a dangling layer. A nightly `docker system prune -af --filter until=48h` keeps disk "
        "usage below 60%. Alert on disk at 80% so RESOURCE failures are caught before CI goes red.",
              "自建 runner 有 {n} 个任务报 `No space left on device`，"
              "原因是每次构建 pgvector 镜像都会留下悬空层。每晚执行 `docker system prune -af --filter "
              "until=48h` 后磁盘占用保持在 60% 以下。磁盘达到 80% 时告警，"
              "在 CI 变红之前发现资源问题（RESOURCE）。"),
    },
    "data_dup_backfill": {
        "fc": "DATA", "cat": "failure_pattern", "types": ["data"], "trig": ["task_failed", "rca_request"],
        "t": ("{job} backfill without an idempotency key created duplicate rows",
              "{job} 回填缺少幂等键导致重复数据"),
        "c": ("The {job} backfill was restarted twice after crashes and each restart re-inserted rows it had "
              "already written, leaving {rows} duplicates in {table}. Use INSERT ON CONFLICT on a natural "
              "key and checkpoint the last id. Duplicates like this are DATA failures that silently skew "
              "every dashboard downstream.",
              "{job} 回填任务崩溃后被重启了两次，每次都重新插入已写过的行，最终在 {table} 中留下 {rows} 条重"
              "复数据。应在自然键上使用 INSERT ON CONFLICT，并记录最后处理的 id。"
              "这类重复属于数据问题（DATA），会悄悄扭曲下游所有看板。"),
    },
    "data_dim": {
        "fc": "DATA", "cat": "failure_pattern", "types": ["data", "dev", "research"],
        "trig": ["task_failed", "systemic_failure"],
        "t": ("Embedding dimension mismatch after the model switch", "更换模型后向量维度不匹配"),
              "c": (
        "After switching models, inserts into {table} failed with `expected {dim} dimensions, not {dim2}`. "
        "Half the workers still ran the old image. Store the model name next to each vector and refuse to "
        "mix dimensions; a DATA error like this should stop the rollout, not be retried.",
              "更换模型后，写入 {table} 时报 `expected {dim} dimensions, not {dim2}`，"
              "原因是一半 worker 还在跑旧镜像。应在每条向量旁记录模型名，并拒绝混用不同维度；"
              "这种数据错误（DATA）应该让发布停下，而不是被重试。"),
    },
    "data_bad_json": {
        "fc": "DATA", "cat": "failure_pattern", "types": ["data", "talk", "audit"],
        "trig": ["task_failed", "alert"],
        "t": ("Malformed JSON from {provider} breaks ingestion", "{provider} 返回非法 JSON 导致入库失败"),
              "c": ("Roughly 1 in {n} responses from {provider} was truncated and the ingest job crashed "
                    "with `JSONDecodeError: Expecting value`. Validate each record, send rejects to a "
                    "dead-letter table and keep going. Report the reject rate daily so DATA quality problems "
                    "are visible.",
              "{provider} 大约每 {n} 个响应中就有 1 个被截断，入库任务报 `JSONDecodeError: Expecting value` "
              "后崩溃。应逐条校验，把异常记录写入死信表后继续处理。每天报告拒收比例，"
              "让数据质量问题（DATA）可见。"),
    },
    "logic_pagination": {
        "fc": "LOGIC", "cat": "failure_pattern", "types": ["dev", "review"],
        "trig": ["task_failed", "rca_request"],
        "t": ("Off-by-one in cursor pagination skips rows", "游标分页差一错误导致漏行"),
              "c": (
        "The cursor query used `id > last_id` but last_id was taken from the row after the page end, so one "
        "row per page was never returned. The audit found {n} learnings that no agent had ever seen. LOGIC "
        "bugs like this pass every happy-path test; add a test that pages through exactly 2.5 pages.",
              "游标查询用的是 `id > last_id`，但 last_id 取的是页尾之后那一行，"
              "于是每页都有一行永远不会被返回。审计发现有 {n} 条经验从未被任何 agent 看到。"
              "这类逻辑错误（LOGIC）能通过所有正常路径测试；需要补一个恰好翻 2.5 页的测试。"),
    },
    "logic_retry_swallow": {
        "fc": "LOGIC", "cat": "failure_pattern", "types": ["dev", "review", "qa"],
        "trig": ["task_failed", "escalation"],
        "t": ("Retry decorator swallowed the exception in {agent}", "{agent} 的重试装饰器吞掉了异常"),
              "c": (
        "Our @retry helper returned None after the last attempt instead of re-raising, so {agent} marked {n} "
        "failed tasks as completed. Reviewers missed it because the tests only covered the success path. Any "
        "retry helper must re-raise the final error; this was a LOGIC failure with real user impact.",
              "我们的 @retry 工具在最后一次尝试后返回 None 而不是重新抛出异常，"
              "导致 {agent} 把 {n} 个失败任务标记成了已完成。评审时没发现，因为测试只覆盖了成功路径。"
              "任何重试工具都必须重新抛出最终错误；这是一个有真实用户影响的逻辑错误（LOGIC）。"),
    },
    "logic_timezone": {
        "fc": "LOGIC", "cat": "failure_pattern", "types": ["dev", "qa", "data"],
        "trig": ["task_failed", "alert"],
        "t": ("Timezone bug: naive datetimes in the scheduler", "时区问题：调度器使用了 naive datetime"),
              "c": (
        "The scheduler compared naive local datetimes with timestamptz values from Postgres, so jobs planned "
        "for 00:30 Asia/Shanghai ran eight hours late. {n} reports were sent with yesterday's data. Use "
        "aware UTC datetimes everywhere and convert only for display; this is a LOGIC error, not a timeout.",
              "调度器把本地 naive datetime 与 Postgres 中的 timestamptz 直接比较，"
              "计划在北京时间 00:30 运行的任务晚了八小时，{n} 份报表发出了前一天的数据。"
              "所有地方都应使用带时区的 UTC 时间，只在展示时转换；这是逻辑错误（LOGIC），不是超时。"),
    },
    # ---- no failure class -------------------------------------------------------------------------
    "pr_size": {
        "fc": None, "cat": "best_practice", "types": ["review"], "trig": [None],
        "t": ("Keep PRs under 400 changed lines", "PR 改动控制在 400 行以内"),
              "c": (
        "PR #{pr} had {loc} changed lines and sat in review for {k} days; the bug it introduced was in a "
        "file nobody read closely. Since we started splitting large changes, median time to merge dropped "
        "from 3 days to 9 hours. Land migrations separately from the code that uses them.",
              "PR #{pr} 改动了 {loc} 行，在评审中挂了 {k} 天，引入的缺陷恰好在一个没人细看的文件里。"
              "自从我们开始拆分大改动，合并耗时中位数从 3 天降到 9 小时。迁移要和使用它的代码分开合入。"),
    },
    "review_run_migration": {
        "fc": None, "cat": "best_practice", "types": ["review", "dev"], "trig": [None],
        "t": ("Reviewers run the migration locally before approving", "评审者批准前需要在本地执行迁移"),
              "c": (
        "Reading SQL in a diff does not reveal lock behaviour. {person} now runs every migration against a "
        "copy of production-sized data before approving, which caught two table rewrites last month. It "
        "takes ten minutes and is cheaper than a blocked deploy.",
              "只看 diff 里的 SQL 看不出锁的行为。{person} 现在批准前会在接近生产规模的数据副本上执行每个迁移"
              "，上个月因此发现了两次整表重写。这只需要十分钟，比阻塞一次发布划算得多。"),
    },
    "qa_quarantine": {
        "fc": None, "cat": "best_practice", "types": ["qa"], "trig": [None, "escalation"],
        "t": ("Quarantine flaky tests within 24 hours", "24 小时内隔离不稳定测试"),
              "c": ("When `{test}` flaked for a week, people started re-running CI by reflex and a real "
                    "regression slipped through in PR #{pr}. Now any test that fails twice without a code "
                    "change is quarantined within a day and gets an owner. The quarantine job still runs and "
                    "reports, it just does not block merges.",
              "`{test}` 不稳定了一周，大家开始习惯性地重跑 CI，结果 PR #{pr} 的真实回归被放了过去。"
              "现在任何在代码无变化时失败两次的测试，都要在一天内隔离并指定负责人。"
              "隔离任务照常运行并上报结果，只是不阻塞合并。"),
    },
    "qa_template_db": {
        "fc": None, "cat": "optimization", "types": ["qa", "dev"], "trig": [None],
        "t": ("Clone a template database per worker to cut CI time", "每个 worker 克隆模板库以缩短 CI 时长"),
              "c": ("The integration stage took {minutes} minutes because every test created its own "
                    "database from scratch. Sharing one template database and cloning it per worker with "
                    "CREATE DATABASE TEMPLATE brought it under ten minutes. Developers now wait for CI "
                    "instead of merging around it.",
              "集成测试阶段耗时 {minutes} 分钟，因为每个测试都从头新建数据库。改为共享一个模板库，"
              "每个 worker 用 CREATE DATABASE TEMPLATE 克隆后，时间降到十分钟以内。开发者现在会等 CI 跑完，"
              "而不是绕过它合并。"),
    },
    "audit_actor": {
        "fc": None, "cat": "best_practice", "types": ["audit"], "trig": [None, "rca_request"],
        "t": ("Every write path logs actor and owner", "所有写操作都要记录操作者和 owner"),
              "c": ("During the access audit of {service} we could not tell which agent had deleted {n} "
                    "memories, because the delete endpoint logged only the request id. Every write now "
                    "records actor, owner_id and a reason string. Without this the audit trail is useless.",
              "在审计 {service} 的访问记录时，我们无法判断是哪个 agent 删除了 {n} 条记忆，"
              "因为删除接口只记录了请求 ID。现在每个写操作都会记录操作者、owner_id 和原因说明。没有这些，"
              "审计轨迹就毫无用处。"),
    },
    "audit_canary": {
        "fc": None, "cat": "insight", "types": ["audit", "research"], "trig": [None],
        "t": ("Cross-owner canary queries catch isolation bugs early", "跨 owner 探针查询能尽早发现隔离缺陷"),
              "c": (
        "We seeded a canary owner with unique marker phrases and query for them as every other owner once an "
        "hour. It fired once, on {date}, when a new hybrid search path forgot the owner filter in the BM25 "
        "branch. Isolation has to be tested on every retrieval path, not only the vector one.",
              "我们给一个探针 owner 写入了独特的标记短语，每小时以其他 owner 的身份查询一次。"
              "{date} 它报警了一次：新加的混合检索路径在 BM25 分支里漏掉了 owner 过滤。"
              "隔离性必须在每条检索路径上测试，而不只是向量检索。"),
    },
    "audit_transient": {
        "fc": None, "cat": "insight", "types": ["audit", "research"], "trig": [None, "rca_request"],
        "t": ("About half of task failures are transient", "大约一半的任务失败是瞬时性的"),
              "c": (
        "Auditing {n}0 failed tasks from the last quarter, {half}% succeeded on a plain retry within an "
        "hour. The rest clustered into a few root causes: expired credentials, billing caps and two logic "
        "bugs. Retrying everything wastes money, so retry by failure class.",
              "审计上季度的 {n}0 个失败任务发现，{half}% 在一小时内简单重试即成功。"
              "其余失败集中在少数几个根因：凭证过期、账单上限和两个逻辑错误。全部重试是在浪费钱，"
              "应按失败类别决定是否重试。"),
    },
    "talk_no_dates": {
        "fc": None, "cat": "best_practice", "types": ["talk"], "trig": [None, "escalation"],
        "t": ("Confirm scope before promising {customer} a date", "向 {customer} 承诺日期前先确认范围"),
              "c": (
        "{agent} told {customer} the export fix would ship on {date}, before anyone had looked at the bug. "
        "It slipped by a week and the customer escalated. The concierge agent now says what happens next and "
        "who owns it, never a date that engineering has not confirmed.",
              "{agent} 在还没人看过缺陷之前，就告诉 {customer} 导出问题会在 {date} 修复。结果拖了一周，"
              "客户升级投诉。现在客服 agent 只说明下一步是什么、由谁负责，不再给出未经研发确认的日期。"),
    },
    "talk_language": {
        "fc": None, "cat": "best_practice", "types": ["talk"], "trig": [None],
        "t": ("Answer in the user's language", "用用户使用的语言回复"),
              "c": (
        "Users who wrote in Chinese and got English replies rated the conversation {score_drop} points lower "
        "on average. Detect the language of the latest user message, not the account locale, and keep error "
        "codes and log lines untranslated.",
              "用中文提问却收到英文回复的用户，对话评分平均低了 {score_drop} 分。"
              "应检测用户最新一条消息的语言，而不是账号的语言设置；错误码和日志保持原文，不要翻译。"),
    },
    "talk_latency": {
        "fc": None, "cat": "insight", "types": ["talk", "research"], "trig": [None],
        "t": ("Most user complaints are about latency, not accuracy", "用户投诉多数与延迟有关，而不是准确性"),
              "c": (
        "We tagged {n}0 support conversations from the last month. About two thirds complained about slow "
        "answers or late reports, and only a handful disputed the content. Latency work will move "
        "satisfaction more than another retrieval tweak.",
              "我们给上个月的 {n}0 条客服对话打了标签。约三分之二抱怨回答慢或报表晚，"
              "质疑内容本身的只有少数几条。优化延迟对满意度的提升会超过再调一次检索。"),
    },
    "hybrid_wins": {
        "fc": None, "cat": "insight", "types": ["research"], "trig": [None],
        "t": ("Hybrid search beats pure vector search on error messages",
              "混合检索在报错信息上优于纯向量检索"),
        "c": ("On our 300 labelled queries, pure vector search scored nDCG@10 0.61 on queries that quote "
              "error messages, BM25 alone 0.72 and RRF fusion 0.79. Exact tokens like `EAI_AGAIN` or "
              "`invalid_grant` are poorly represented by embeddings. Keep the lexical branch.",
              "在 300 条已标注查询上，对于引用报错信息的查询，纯向量检索 nDCG@10 为 0.61，单独 BM25 为 0.72，"
              "RRF 融合达到 0.79。`EAI_AGAIN`、`invalid_grant` 这类精确词元在向量中表达很差。"
              "词法检索分支必须保留。"),
    },
    "chunk_512": {
        "fc": None, "cat": "insight", "types": ["research", "data"], "trig": [None],
        "t": ("512-token chunks are the sweet spot for our notes", "512 token 分块最适合我们的笔记"),
              "c": (
        "Chunks of 256 tokens lost context and 1024 diluted the embedding; 512 with 50 tokens of overlap "
        "gave the best recall@10, ahead by {pct} points. The result held for Chinese text once we counted "
        "tokens with the real tokenizer instead of characters.",
              "256 token 的分块丢失上下文，1024 又稀释了向量；512 加 50 token 重叠的 recall@10 最好，"
              "领先 {pct} 个点。在改用真实分词器而不是按字符计数之后，这个结论对中文同样成立。"),
    },
    "ef_search_local": {
        "fc": None, "cat": "optimization", "types": ["research", "dev"], "trig": [None],
        "t": ("Raise hnsw.ef_search only on the rerank path", "只在重排路径上调高 hnsw.ef_search"),
              "c": (
        "Setting ef_search to 200 globally pushed p95 to {ms} ms. Using `SET LOCAL hnsw.ef_search = 200` "
        "only inside the transaction that feeds the reranker kept interactive queries at 40 while improving "
        "final recall. Per-query knobs beat global ones.",
              "全局把 ef_search 设为 200 后 p95 升到 {ms} ms。只在给重排器取候选的事务里执行 `SET LOCAL "
              "hnsw.ef_search = 200`，交互查询保持 40，同时提升了最终召回。按查询调参优于全局调参。"),
    },
    "copy_bulk": {
        "fc": None, "cat": "optimization", "types": ["data"], "trig": [None],
        "t": ("COPY instead of INSERT for bulk loads into {table}",
              "向 {table} 批量导入用 COPY 而不是 INSERT"),
        "c": ("Loading {rows} rows into {table} with executemany took {minutes} minutes; psycopg's COPY took "
              "under two. Validate in Python, stream through COPY into a staging table, then merge with one "
              "INSERT SELECT.",
              "用 executemany 向 {table} 导入 {rows} 行花了 {minutes} 分钟，"
              "改用 psycopg 的 COPY 后不到两分钟。先在 Python 中校验，再通过 COPY 流式写入临时表，"
              "最后用一条 INSERT SELECT 合并。"),
    },
    "embed_batch": {
        "fc": None, "cat": "optimization", "types": ["data", "dev"], "trig": [None],
        "t": ("Batch embedding requests 64 at a time", "Embedding 请求每批 64 条"),
              "c": (
        "Sending texts one by one to the embedding endpoint spent most of the time in round trips. Batches "
        "of 64 raised throughput about {retries}x and reduced 429s at the same time, since the limit counts "
        "requests as well as tokens.",
              "逐条把文本发给 embedding 接口，大部分时间都花在往返上。改为每批 64 条后吞吐提升约 {retries} 倍"
              "，同时 429 也减少了，因为限额既按 token 也按请求数计算。"),
    },
    "canary_first": {
        "fc": None, "cat": "best_practice", "types": ["dev"], "trig": [None, "escalation"],
        "t": ("Canary {service} before full rollout, always", "{service} 全量发布前必须先金丝雀"),
              "c": (
        "The {service} {ver} release went straight to 100% on {date} and a config typo took the service down "
        "for {minutes} minutes. With a {pct}% canary and an automatic rollback on error rate, the same typo "
        "would have affected a handful of requests.",
              "{date} {service} {ver} 直接全量发布，一个配置拼写错误让服务中断了 {minutes} 分钟。"
              "如果先放 {pct}% 金丝雀并在错误率升高时自动回滚，同样的错误只会影响少量请求。"),
    },
    "unlogged_cache": {
        "fc": None, "cat": "insight", "types": ["dev", "research"], "trig": [None],
        "t": ("Unlogged tables are good enough for caches", "unlogged 表足以胜任缓存"),
              "c": (
        "We compared Redis with a Postgres unlogged table for the query-embedding cache. Lookups took 0.4 ms "
        "versus 0.9 ms, a difference nobody notices next to a 300 ms model call, and we got rid of a second "
        "datastore. Crash truncation is acceptable for a cache.",
              "我们在查询向量缓存上对比了 Redis 和 Postgres unlogged 表。查询耗时 0.4 ms 对 0.9 ms，"
              "和 300 ms 的模型调用相比没人感觉得到，而且少维护一个数据存储。崩溃后表被清空，"
              "对缓存来说可以接受。"),
    },
}

# (pair id, template, owner): each renders the same slots in English and in Chinese
LEARNING_PAIRS: list[tuple[str, str, str]] = [
    ("p01", "auth_expired", "team-alpha"), ("p02", "rl_retry_after", "team-alpha"),
    ("p03", "res_pool", "team-alpha"), ("p04", "res_leak", "team-alpha"),
    ("p05", "to_backoff", "team-alpha"), ("p06", "bc_stop_all", "team-alpha"),
    ("p07", "net_nat_reset", "team-alpha"), ("p08", "data_dup_backfill", "team-beta"),
    ("p09", "logic_pagination", "team-alpha"), ("p10", "net_dns", "team-beta"),
    ("p11", "auth_refresh_reuse", "team-beta"), ("p12", "to_statement", "team-beta"),
    ("p13", "pr_size", "team-beta"), ("p14", "hybrid_wins", "solo-gamma"),
]
TASK_PAIR_TOPICS = ["auth", "rate_limit", "billing", "memleak", "migration", "flaky", "backfill", "network"]

# --------------------------------------------------------------------------------------------------
# Capabilities and goals (hand-written; descriptions in one language each)
# --------------------------------------------------------------------------------------------------

CAPABILITIES: list[tuple[str, str, str]] = [
    ("team-alpha", "planner.decompose_task",
     "Breaks a feature request into dev/review/qa subtasks with acceptance criteria and estimates, and links "
     "each subtask to the parent task id."),
    ("team-alpha", "coder.open_pr",
     "在指定仓库创建分支、提交代码并开 PR，自动填写 PR 模板和关联的任务编号。"),
    ("team-alpha", "reviewer.pr_review",
     "Reviews pull requests for correctness, SQL injection, missing tests and migration safety; posts one "
     "batched review to avoid GitHub secondary rate limits."),
    ("team-alpha", "deploy.helm_canary",
     "用 Helm 分阶段灰度发布（5% → 25% → 100%），错误率超过 2% 自动回滚。"),
    ("team-alpha", "auth.token_refresh",
     "Refreshes OAuth access tokens 60 s before expiry, serializes refresh-token rotation behind a row lock "
     "and raises AUTH failures that need re-consent."),
    ("team-alpha", "ratelimit.shared_bucket",
     "跨 worker 的共享令牌桶，基于 Postgres 单行锁实现，遵守 Retry-After，按供应商 key 分别限流。"),
    ("team-alpha", "pgvector.index_tuning",
     "Builds and tunes HNSW and IVFFlat indexes: picks m, ef_construction and ef_search from a "
     "recall/latency sweep on the eval set."),
    ("team-alpha", "billing.spend_guard",
     "批量任务启动前估算 token 用量和费用，预计超出剩余预算时拒绝执行并发出 BILLING_CAP 事件。"),
    ("team-alpha", "incident.rca_writer",
     "Drafts a root-cause analysis from failed task events, alerts and deploy history, grouped by failure "
     "class, with a timeline and action items."),
    ("team-alpha", "memory.project_summary",
     "按项目汇总需求、计划、开发记录和测试结论，生成供新 agent 读取的项目记忆摘要。"),
    ("team-alpha", "research.retrieval_eval",
     "Runs retrieval benchmarks (recall@k, nDCG@10, p95 latency) for BM25, vector and hybrid search on "
     "labelled bilingual queries."),
    ("team-alpha", "migration.safe_runner",
     "执行数据库迁移：设置 lock_timeout、分批回填、CONCURRENTLY 建索引，失败时自动重试并报告锁等待。"),
    ("team-beta", "etl.backfill",
     "Idempotent backfills with checkpoints in backfill_state, ON CONFLICT upserts and a dead-letter table "
     "for rejected rows."),
    ("team-beta", "etl.partition_sensor",
     "等待上游分区就绪（行数和时间戳校验）后再触发下游任务，避免空分区导致的零值报表。"),
    ("team-beta", "qa.flaky_detector",
     "Detects flaky tests from CI history (failures without a code change), quarantines them and files a "
     "follow-up task with an owner."),
    ("team-beta", "qa.regression_suite",
     "在 8 个并行 worker 上运行回归测试，按模块分组，失败时附上日志尾部和最近合入的 PR。"),
    ("team-beta", "reviewer.pr_review",
     "Reviews data pipeline PRs: checks idempotency and partition handling, and that migrations land before "
     "the code that reads them."),
    ("team-beta", "audit.access_logs",
     "审计服务访问日志：异常 IP 使用服务令牌、agent 调用管理接口、跨 owner 访问。"),
    ("team-beta", "dashboard.metrics_panel",
     "Builds Grafana panels for task failure rate by failure_class, 429 rate and provider spend against the "
     "billing cap."),
    ("team-beta", "talk.customer_reply",
     "用客户使用的语言回复工单，说明原因、下一步和负责人，不承诺未经确认的日期。"),
    ("team-beta", "data.quality_checks",
     "Row-count, null-rate and freshness checks on core tables; raises DATA alerts when thresholds are "
     "crossed."),
    ("solo-gamma", "notes.weekly_digest",
     "Summarizes the week's research notes and saved links into a digest with open questions."),
    ("solo-gamma", "notes.capture", "从聊天记录中提取待办和想法，写入个人记忆库并打标签。"),
    ("solo-gamma", "research.paper_reader",
     "Reads papers chunk by chunk and extracts the method, datasets and results into a structured note."),
    ("solo-gamma", "talk.personal_assistant", "个人助理对话：回答关于过往笔记的问题，并引用原始记录。"),
    ("solo-gamma", "embeddings.local_model",
     "Computes embeddings locally with a small multilingual model so personal notes never leave the "
     "machine."),
]

# (owner, title, description, status, priority, progress, age_days)
GOALS: list[tuple[str, str, str, str, int, int, float]] = [
    ("team-alpha", "Q1 OKR: p95 retrieval latency under 200 ms",
     "Measured at the API gateway including query embedding. Currently 310 ms; HNSW migration and the "
     "embedding cache are the two big levers.", "in_progress", 0, 55, 38.5),
    ("team-alpha", "任务失败率降到 3% 以下",
     "按 failure_class 拆解：RATE_LIMIT 和 AUTH 占失败总数的六成，先解决共享限流和令牌刷新。",
     "in_progress", 0, 40, 52.0),
    ("team-alpha", "Cross-lingual learning recall@10 >= 0.9",
     "A Chinese query must find the English learning on the same topic and vice versa. Eval set: 120 "
     "bilingual pairs labelled by 张伟 and Alice.", "in_progress", 1, 30, 44.2),
    ("team-alpha", "所有 agent 迁移到统一的 OAuth 网关",
     "GitHub、飞书、Google 的凭证全部由 Relay 网关托管，agent 不再保存第三方令牌。", "pending", 1, 0, 20.7),
    ("team-alpha", "Zero-downtime migrations for memory tables",
     "lock_timeout on every migration, batched backfills, indexes built CONCURRENTLY.",
     "completed", 2, 100, 150.3),
    ("team-alpha", "Cut provider spend by 25%",
     "Query-embedding cache plus batching. Reached -28% in November.", "completed", 1, 100, 121.9),
    ("team-alpha", "接入飞书机器人通知", "告警和升级事件推送到飞书群。后来统一改用 Slack，目标取消。",
     "cancelled", 3, 20, 97.4),
    ("team-alpha", "Automatic RCA drafts for systemic failures",
     "When three or more tasks fail with the same class within 15 minutes, open an rca_request with a draft "
     "timeline.", "pending", 2, 10, 9.6),
    ("team-beta", "Harbor backfills idempotent by end of quarter",
     "Every backfill declares a natural key, upserts with ON CONFLICT and checkpoints in backfill_state.",
     "in_progress", 0, 65, 61.0),
    ("team-beta", "回归测试时长控制在 10 分钟内",
     "8 个 worker 并行 + 不稳定测试隔离，目前 9 到 12 分钟波动。", "in_progress", 1, 70, 80.2),
    ("team-beta", "Pulse 看板上线 429 和账单告警面板", "第二阶段计划的一部分，依赖 Harbor 的事件字段统一。",
     "pending", 1, 5, 33.1),
    ("team-beta", "Retire the legacy cron scheduler", "All ETL jobs moved to Airflow with sensors.",
     "completed", 2, 100, 140.5),
    ("team-beta", "数据质量校验覆盖全部核心表", "行数、空值率和新鲜度三类检查，异常时发出 DATA 告警。",
     "pending", 2, 0, 15.8),
    ("solo-gamma", "Notes Bot: weekly digest of research notes",
     "Every Friday, summarize new notes and open questions into one page.", "in_progress", 2, 25, 27.3),
    ("solo-gamma", "个人助理改用本地向量模型", "避免笔记上传到外部服务。模型太慢，暂时放弃。",
     "cancelled", 3, 10, 88.0),
]

# --------------------------------------------------------------------------------------------------
# Memories
# --------------------------------------------------------------------------------------------------

SHORT_MEMORIES: dict[str, list[Pair]] = {
    "requirement": [
        ("Requirement from {person}: every query in {project_name} must filter by owner_id inside SQL. "
         "Filtering in Python after retrieval is not acceptable, because the limit would apply before the "
         "filter.",
         "{person} 提出的需求：{project_name} 中的每个查询都必须在 SQL 内按 owner_id 过滤。"
         "检索后再在 Python 中过滤不可接受，因为 limit 会先于过滤生效。"),
        ("{project_name} needs top-10 retrieval p95 under {ms} ms at {rows} chunks, measured at the API "
         "gateway rather than inside the database.",
         "{project_name} 要求在 {rows} 个分块规模下，top-10 检索 p95 低于 {ms} ms，以 API 网关侧测量为准，"
         "而不是数据库内部耗时。"),
        ("Cross-lingual recall is a hard requirement: a Chinese query about 认证失败 must find the English "
         "learning about auth errors, and the other way round. Agreed with {person} on {date}.",
         "跨语言召回是硬性要求：用英文搜索 auth error 要能找到中文的“认证失败”经验，反之亦然。"
         "{date} 与 {person} 确认。"),
        ("Retention: raw events are kept 30 days and then summarized into learnings; learnings and memories "
         "are kept until the owner deletes them. Deletion must cascade to chunks and embeddings.",
         "保留策略：原始事件保留 30 天，之后汇总为经验条目；经验和记忆保留到 owner 主动删除为止。"
         "删除必须级联到分块和向量。"),
    ],
    "plan": [
        ("Plan for the sprint ending {date}: (1) migration {migration}, (2) HNSW index on {table}, (3) a 429 "
         "panel in Grafana. {person} owns the first two, {person2} the dashboard.",
         "截至 {date} 的迭代计划：(1) 迁移 {migration}；(2) 在 {table} 上建 HNSW 索引；(3) Grafana 429 面板。"
         "前两项由 {person} 负责，看板由 {person2} 负责。"),
        ("Rollout plan: dark-launch the new ranker behind the `ranker_v2` flag for {pct}% of tasks, compare "
         "for a week how often agents actually use the injected learnings, then decide.",
         "发布计划：用 `ranker_v2` 开关对 {pct}% 的任务灰度新的排序器，"
         "观察一周 agent 实际采用注入经验的比例后再决定是否全量。"),
        ("Next quarter {project_name} focuses on reliability over features: failure rate under 3%, a retry "
         "policy for every failure class, and automatic RCA drafts for systemic failures.",
         "下个季度 {project_name} 的重心放在稳定性而不是新功能：失败率低于 3%，"
         "每种失败类别都有对应的重试策略，系统性故障自动生成 RCA 草稿。"),
        ("Migration plan for {table}: add a nullable owner_id, backfill in 10k batches overnight, validate "
         "the CHECK constraint, then SET NOT NULL. Rollback is just dropping the column.",
         "{table} 的迁移计划：先加可空的 owner_id，夜间按每批 1 万行回填，验证 CHECK 约束后再 SET NOT NULL。"
         "回滚只需删除该列。"),
    ],
    "development": [
        ("Implemented {feature} in PR #{pr}. The tricky part was keeping it inside one transaction so that a "
         "crash never leaves half-written chunks; {person} reviewed it.",
         "在 PR #{pr} 中实现了{feature}。难点是让整个过程处于同一事务中，崩溃时不会留下写了一半的分块；"
         "由 {person} 评审。"),
        ("Switched {service} to one shared httpx.AsyncClient per process. Before this every task created its "
         "own client and we leaked sockets and memory.",
         "{service} 改为每个进程共享一个 httpx.AsyncClient。之前每个任务都会新建客户端，"
         "导致 socket 和内存泄漏。"),
        ("Added failure classification to {project_name}: errors are mapped to NETWORK, BILLING_CAP, "
         "RATE_LIMIT, RESOURCE, AUTH, TIMEOUT, DATA or LOGIC where they are caught, with the raw message "
         "kept in metadata.",
         "{project_name} 增加了失败分类：在捕获异常的位置把错误映射为 NETWORK、BILLING_CAP、RATE_LIMIT、"
         "RESOURCE、AUTH、TIMEOUT、DATA 或 LOGIC，原始错误信息保存在 metadata 中。"),
        ("Refactored the chunker to split on paragraph and sentence boundaries before falling back to token "
         "windows. Chinese text is split on 。！？ first.",
         "重构了分块器：先按段落和句子边界切分，不够再退回到 token 窗口。中文优先按 。！？ 切分。"),
    ],
    "testing": [
        ("Load test on {date}: {rps} rps for 10 minutes, p95 {ms} ms, zero errors. Pool size {pool} was "
         "enough; database CPU peaked at {pct2}%.",
         "{date} 压测：{rps} rps 持续 10 分钟，p95 {ms} ms，零错误。连接池 {pool} 足够，"
         "数据库 CPU 峰值 {pct2}%。"),
        ("Regression run for release {ver}: {runs} tests, {k} failures, all of them in quarantined flaky "
         "tests. Signed off by {person}.",
         "版本 {ver} 回归测试：共 {runs} 个用例，{k} 个失败，全部是已隔离的不稳定测试。"
         "{person} 已签字确认。"),
        ("Isolation test for {project_name}: two owners with identical content, queried as each other across "
         "vector, full-text and hybrid paths. Zero leaks in 1,000 randomized queries.",
         "{project_name} 隔离测试：两个 owner 写入相同内容，在向量、全文和混合检索路径上互相查询，"
         "1000 次随机查询零泄漏。"),
        ("Chaos test: killed the primary during a backfill. The job resumed from its checkpoint {sec} s "
         "after failover and produced no duplicates.",
         "混沌测试：回填过程中杀掉主库，故障切换后任务在 {sec} 秒内从断点恢复，没有产生重复数据。"),
    ],
    "insight": [
        ("Most failures in {project_name} over the last month were RATE_LIMIT errors from {provider}, "
         "concentrated around {hh}:00. Moving batch work out of that window matters more than any code "
         "change.",
         "过去一个月 {project_name} 的失败大多是 {provider} 的 RATE_LIMIT 错误，集中在 {hh} 点前后。"
         "把批处理任务移出这个时间段比任何代码改动都重要。"),
        ("Agents that receive two or three relevant learnings finish review tasks faster; more than five "
         "learnings in the prompt made them slower and less focused.",
         "注入两三条相关经验时，agent 完成评审任务更快；提示词中经验超过五条反而更慢、更不聚焦。"),
        ("When the same failure hits three or more tasks within 15 minutes, it is almost always systemic "
         "(credentials, billing cap, provider outage) rather than a bug in one task.",
         "15 分钟内有三个以上任务出现同样的失败时，几乎总是系统性问题（凭证、账单上限、供应商故障），"
         "而不是单个任务的缺陷。"),
        ("Chinese and English notes about the same incident embed close together with the multilingual "
         "model, but BM25 never matches them. Cross-lingual hits depend on the vector branch of hybrid "
         "search.",
         "同一事故的中英文记录在多语言模型下向量很接近，但 BM25 永远匹配不上。"
         "跨语言命中必须依靠混合检索中的向量分支。"),
    ],
}

# Earlier decisions and the later memories that revise them: (owner, project, content_type, [(age, text)])
MEMORY_UPDATES: list[tuple[str, str, str, list[tuple[float, str]]]] = [
    ("team-alpha", "atlas-search", "development", [
        (152.4, "Decision (Aug 2): we chose Redis for the query-embedding cache. Key is sha1(model + text), "
                "TTL 7 days, maxmemory 2 GB with allkeys-lru. Bob set it up on the shared Redis cluster; the "
                "hit rate in staging is about 41%."),
        (41.2, "Update (Nov 21): we moved the query-embedding cache from Redis to PostgreSQL unlogged "
               "tables. Running a second datastore for a 41% hit-rate cache was not worth it, and the shared "
               "Redis cluster kept evicting our keys during the nightly batch. The unlogged table "
               "embedding_cache (key text primary key, embedding vector, created_at) is truncated after a "
               "crash, which is fine for a cache. Hit rate is now 58% because entries are no longer "
               "evicted."),
    ]),
    ("team-alpha", "atlas-search", "plan", [
        (131.0, "索引方案：memory_chunks.embedding 上建 IVFFlat 索引，lists=100，查询时 probes=10。"
                "当前数据量约 20 万行，召回率 0.93，够用，暂不考虑 HNSW。"),
        (26.5, "索引方案更新（12 月 6 日）：数据涨到 180 万行后，IVFFlat 的召回率掉到 0.81，"
               "而且每次大批量写入后都要重建。已改为 HNSW（m=16，ef_construction=64），查询时 ef_search=40，"
               "召回率回到 0.97，p95 从 38 ms 降到 21 ms。旧的 IVFFlat 索引已删除。"),
    ]),
    ("team-alpha", "relay-gateway", "development", [
        (118.7, "Retry policy for provider calls in the Relay gateway: 3 retries with a fixed 1 s sleep, on "
                "any exception. Simple and good enough for now."),
        (28.9, "Retry policy changed after the Dec 2 incident: fixed 1 s retries amplified the 429 storm. "
               "Now we use exponential backoff (base 0.5 s, factor 2, cap 30 s) with full jitter, at most 5 "
               "attempts, honour Retry-After when present, and never retry AUTH or BILLING_CAP errors."),
    ]),
    ("team-alpha", "ledger-billing", "requirement", [
        (109.3, "Invoices and monthly usage summaries are generated on the 1st at 00:00 UTC."),
        (18.2, "Change agreed with Frank from finance: monthly usage summaries are now generated at 02:00 "
               "Asia/Shanghai on the 1st, because the Shanghai office closes the books in local time and the "
               "UTC run kept missing the last eight hours of the month."),
    ]),
    ("team-beta", "harbor-etl", "plan", [
        (139.5, "调度方案：Harbor 的 ETL 任务用 Kubernetes CronJob 触发，每天凌晨 2 点跑全量。"),
        (47.8, "调度方案调整：CronJob 没有依赖管理，上游延迟时下游照跑，已经导致三次空数据报表。"
               "现已迁移到 Airflow，改成每日增量 + 每周日全量，任务之间用 sensor 等待上游分区就绪。"),
    ]),
    ("team-beta", "sentinel-qa", "testing", [
        (126.1, "Test runner: pytest-xdist with 4 workers; the full regression suite takes about 22 "
                "minutes."),
        (66.4, "Test runner update: we went to 8 workers with --dist loadgroup and moved the flaky tests "
               "into a quarantine job that does not block merges. The full suite now takes 9 minutes."),
    ]),
    ("team-beta", "pulse-dashboard", "development", [
        (117.0, "Embedding 模型：Pulse 使用 OpenAI text-embedding-3-small（1536 维）。"),
        (35.6, "Embedding 模型更换：为了控制费用并支持离线部署，Pulse 改用本地 bge-m3（1024 维），"
               "所有向量已重新计算，旧的 1536 维列已删除。中英文混合查询的召回率反而提高了 6 个点。"),
    ]),
]

# Long memories (several paragraphs each). Blank lines separate paragraphs; within a paragraph, source
# lines are joined with a space (English) or nothing (Chinese).
LONG_MEMORIES: list[tuple[str, str, str, float, str, str]] = [
    ("team-alpha", "atlas-search", "plan", 128.0, "en", """
Atlas Search v2: design and rollout plan (Alice and 张伟, last edited Aug 26).

Context. Atlas is the retrieval layer every agent calls before it starts a task: given the task title,
description and type, it returns the learnings and project memories most likely to help. Version 1 was a
single cosine-similarity query over memory_chunks with an IVFFlat index, and it worked while we had a few
hundred thousand chunks from one team. Since team-beta onboarded in July we have 1.8 million chunks, two
languages, and agents that complain about getting the same three generic learnings for every task. The
reviewer agent in particular keeps receiving deployment advice when it reviews SQL migrations.

Goals. (1) p95 under 200 ms for top-10 at the API gateway, including embedding the query. (2)
Cross-lingual recall: a Chinese query about 认证失败 must surface the English learning about expired tokens
and 401s, and the other way round. (3) Strict owner isolation: the owner filter is applied in SQL on every
path, vector and lexical, before any limit. (4) Relevance that knows about the task: a learning recorded
for a failed review with failure class AUTH should outrank a generic best practice when the new task is a
review that just failed with a 401.

Design. Retrieval becomes a two-stage pipeline. Stage one gathers candidates from two branches: an HNSW
vector search (m=16, ef_construction=64, ef_search=40) and a full-text search over a tsvector column, each
limited to 50 rows per owner. Stage two fuses them with reciprocal rank fusion (k=60) and then adds a
structured relevance score: +10 when task_type matches, +8 for the same failure_class, +6 for the same
trigger_event and +4 when the learning is a failure_pattern. The structured score is added after
normalization, so a strongly matching learning can jump ahead of one that is merely similar. Recency only
breaks ties; old learnings about rare failures are often the most valuable ones.

Alternatives considered. We looked at a dedicated vector database. It would give faster ANN at a larger
scale, but also a second source of truth, a second place to enforce owner isolation and a sync job that
can lag. At our size pgvector with HNSW is fast enough, and keeping everything in one PostgreSQL
transaction is worth more than a few milliseconds. We also considered dropping the lexical branch; the
research agent's benchmark showed that queries quoting error strings such as EAI_AGAIN or invalid_grant
lose a lot of recall without it, so it stays.

Chunking. Memories are split into chunks of at most 500 tokens with 50 tokens of overlap, on paragraph and
sentence boundaries where possible. Chinese sentences end with 。！？ and must be recognized as boundaries,
otherwise a whole Chinese document becomes one giant sentence and gets cut mid-phrase. Each chunk keeps a
pointer to its memory and its position so that callers can reassemble the context around a hit.

Rollout. Week 1: build the HNSW index CONCURRENTLY on staging and compare recall against IVFFlat on the
300 labelled queries. Week 2: ship the two-branch retrieval behind the ranker_v2 flag for 10% of tasks.
Week 3: if agents accept the injected learnings at least as often as with v1 and p95 stays under 200 ms,
go to 100% and drop the IVFFlat index. Bob is on call for the rollout; 张伟 owns the index migration.

Risks. The index build needs about 2 GB of maintenance_work_mem and competes with the nightly backfill, so
it is scheduled for a Sunday. The structured score weights are a guess; we will log every ranking decision
with its components so that we can tune them offline instead of arguing about them in review.
"""),
    ("team-alpha", "relay-gateway", "insight", 29.5, "en", """
Postmortem: RATE_LIMIT storm on the Relay gateway, Dec 2 (author: Bob, reviewed by 李娜 and Carol).

Summary. Between 01:10 and 03:40 Asia/Shanghai, 412 agent tasks failed or were delayed because calls
through the Relay gateway to the model provider returned HTTP 429 Too Many Requests. The nightly
re-embedding job for Atlas and the weekly evaluation run started within the same minute, and together they
pushed us over the 90,000 tokens-per-minute limit of our organization key. Our own retry logic then turned
a short burst into a two-and-a-half-hour incident.

Timeline. 01:00 the re-embedding job starts with 16 workers. 01:02 the evaluation run starts with 8
workers. 01:10 first 429 responses; the gateway retries each one after exactly one second. 01:25 the
systemic failure detector fires after 37 task_failed events with failure class RATE_LIMIT in 15 minutes
and pages Bob. 01:40 Bob pauses the evaluation run; the error rate drops but does not recover, because the
re-embedding workers are still retrying in lockstep. 02:55 李娜 deploys a config change that honours the
Retry-After header. 03:40 the queue is drained and the error rate is back to normal.

Root cause. Three factors contributed. First, each worker had its own local limiter, so 24 workers each
believed they were allowed the full rate. Second, the retry policy used a fixed one-second delay with no
jitter and ignored Retry-After, which synchronized the retries into waves. Third, the two heavy jobs were
scheduled independently by two teams, and nobody had a view of total demand per provider key.

What went well. The systemic failure detector grouped the failures correctly and the RCA request was
created automatically with the right failure class, so the on-call engineer knew within minutes that this
was a rate limit problem and not a provider outage. No data was lost: the failed tasks were retried
successfully after the incident.

Action items. (1) Replace per-worker limiters with one shared token bucket per provider key, stored in
PostgreSQL (owner: Carol, done Dec 9). (2) Change the retry policy to exponential backoff with full
jitter, honour Retry-After, and never retry AUTH or BILLING_CAP errors (owner: 李娜, done Dec 4). (3) Keep a
shared calendar of heavy batch jobs per provider key and move the evaluation run to 04:30 (owner: Bob).
(4) Add a Grafana panel for the remaining rate limit headroom, alerting at 20% (owner: Dave).

Lessons. A rate limit is a shared resource, not a property of a single worker, and retries are load. Any
retry policy that does not back off will make an overload worse. When many tasks fail with the same class
in a short window, stop and look at the system before retrying individual tasks.
"""),
    ("team-beta", "sentinel-qa", "testing", 75.0, "en", """
Sentinel QA: flaky test review for Q3 (prepared by Grace with the qa-agent, Oct 18).

Scope. We looked at every CI run on main and on pull requests between July 1 and September 30: 4,812 runs
of the regression suite across the harbor-etl, sentinel-qa and pulse repositories. A test counts as flaky
when it failed and then passed on a re-run of the same commit. By that definition 61 tests were flaky at
least once, and 14 of them account for 80% of all flaky failures.

Categories. The biggest group, 23 tests, depended on shared state: several pytest-xdist workers used the
same owner_id fixture and deleted each other's rows, or a test relied on rows left behind by another one.
The second group, 17 tests, depended on time: assertions on age_days or on "yesterday" computed with
datetime.now() that broke around midnight UTC, and one test that assumed the server ran in Asia/Shanghai.
Eleven tests had timeouts that were too tight for the shared CI runners, typically 2 seconds for a query
that takes 0.5 seconds on a laptop and 3 seconds on a busy runner. The remaining ten were real bugs that
only showed up under concurrency, including a race in the backfill checkpoint that could process a batch
twice.

What we changed. Every test now gets a fresh owner generated from the test node id, so parallel workers
can never see each other's data. Time is injected through a clock fixture and frozen by default. Timeouts
in tests are expressed as multiples of a baseline calibrated at session start. Tests that fail twice
without a code change are quarantined automatically within 24 hours: they still run in a separate job and
report to the dashboard, but they do not block merges. Each quarantined test gets an owner and a follow-up
task, and the quarantine list is reviewed every Monday.

Results. The suite went from 4 workers to 8 with --dist loadgroup, and wall-clock time dropped from about
22 minutes to 9. The share of pull requests that needed a manual re-run fell from 31% to 6% over
September. Two of the concurrency bugs found through this work would have caused duplicate rows in
production: the checkpoint race mentioned above, and an off-by-one in cursor pagination that skipped one
row per page.

Open issues. Three tests in the pulse e2e suite still fail about once a week with browser timeouts, and we
have not found a pattern. The qa-agent sometimes proposes quarantining a test that fails because of a real
regression; for now a human (Grace or 王芳) confirms every quarantine decision. We also want flaky detection
to use the learnings store, so that a test which failed for a known reason, for example a RATE_LIMIT from
the GitHub API, is not counted as flaky at all.
"""),
    ("team-alpha", "ledger-billing", "requirement", 95.0, "en", """
Ledger Billing: requirements for billing cap handling (owner: Erin; stakeholders: Frank from finance and
刘洋 from platform). Last updated Sep 28.

Background. In August we hit the monthly billing cap of our main model provider twice. Both times the
provider started answering every call with insufficient_quota, our agents treated that as a generic
upstream error, and hundreds of tasks failed one after another while the retry logic kept the queue full.
Finance only learned about it from a Slack message the next morning. These requirements describe how
Ledger must track spend, enforce caps and react when a BILLING_CAP error happens.

R1 Spend tracking. Every call through the gateway records owner, project, provider, model, input and
output tokens and the computed cost in the usage table within one minute of the call. Daily and monthly
totals per owner and per provider key must be queryable in under one second for the dashboard.

R2 Budgets. Each owner has a monthly budget and each provider key has a hard cap that mirrors the limit
configured at the provider. Budgets live in budget.yaml and are reviewed by finance; every change is
logged with the approver's name.

R3 Pre-flight estimates. Any batch task above 100,000 items must carry an estimated cost before it is
scheduled. If the estimate is above 50% of the owner's remaining monthly budget, the task is held in
pending and an escalation goes to the owner's lead. The estimate must be within 20% of the actual cost for
the embedding jobs we ran in Q3.

R4 Reaction to a cap. When a provider returns insufficient_quota or HTTP 402, the error is classified as
BILLING_CAP, never retried, and the gateway stops routing new work to that key for the affected owner. One
systemic_failure event is emitted with the count of affected tasks, instead of one alert per task. Queued
tasks stay pending and resume automatically when the cap is raised or the month rolls over.

R5 Alerts. Alerts fire at 50%, 80% and 95% of each budget. The 95% alert goes to finance and to the
on-call engineer; the others only to the owning team. Every alert says how many days are left in the month
and the projected end-of-month spend at the current rate.

R6 Reporting. A weekly report lists spend per owner and project, the ten most expensive tasks and any
tasks that were held by the pre-flight check. Finance wants it in both English and Chinese, because the
Shanghai office reads it too.

Out of scope. Invoicing customers, currency conversion and per-user quotas inside an owner are not part of
this work. They will be revisited after the Q1 planning round, once we know whether team-gamma joins the
shared provider keys or keeps its own.
"""),
    ("team-beta", "harbor-etl", "development", 60.0, "zh", """
Harbor 回填框架重构说明（作者：陈静，评审：赵磊、Alice，11 月 2 日）。

背景。Harbor 数据管道每天要把任务事件、对话记录和账单明细从上游导入到分析库，并为新增文本计算向量。
过去半年里回填任务出了三次比较严重的问题：一次是任务崩溃后重启，把已经写入的数据又插了一遍，
task_events 表里多了四十多万行重复数据；一次是上游分区晚到，下游任务在空分区上照常运行，
看板上连续两天显示为零；还有一次是更换向量模型后，一半 worker 还在跑旧镜像，新旧维度混在一起导致写入失败。
这三次问题的根源都在回填框架本身，所以这次决定重构，而不是再打补丁。

设计要点一：幂等。每个回填任务都必须声明自然键，写入统一使用 INSERT ON CONFLICT DO UPDATE。
任务每处理完一批，就把最后的主键和批次号写入 backfill_state 表，并且与数据写入放在同一个事务里提交。
这样无论任务在哪一步崩溃，重启后都会从最后一次成功提交的位置继续，不会重复，也不会遗漏。

设计要点二：等待上游。新增分区就绪检查：下游任务启动前先检查上游分区的行数和最新时间戳，
行数低于过去七天均值的百分之三十，或者时间戳早于预期，就进入等待状态，每十分钟检查一次，最多等待六小时。
超过六小时仍未就绪则发出告警并升级给当天的值班人员，而不是直接在空数据上运行。

设计要点三：数据校验和死信表。每条记录在写入前都要经过校验：必填字段不能为空，JSON 必须能解析，
向量维度必须与当前模型一致。校验失败的记录写入 dead_letter 表，附上原因和原始内容，任务继续处理后面的数据。
每天早上由 etl-agent 汇总拒收比例，超过百分之一就自动创建一个数据质量任务，指派给对应表的负责人。

设计要点四：费用与限流。向量计算统一走网关，按每批 64 条发送。任务启动前先估算 token 数量和费用，
超过剩余预算一半时任务保持 pending 并通知负责人。遇到 429 时按 Retry-After 等待，
遇到账单上限错误则立即暂停整个队列，不做任何重试，等额度恢复后由负责人手动放行。

测试情况。我们在 staging 上模拟了三类故障：在第 37 批处理过程中强制杀掉任务进程、
在回填期间让主库发生故障切换、
以及人为让上游分区延迟四小时。三种情况下新框架都能正确恢复：进程被杀后从第 37 批继续，没有重复数据；
主库切换后任务在四十秒内自动重连；上游延迟期间任务一直处于等待状态，分区就绪后自动开始。
对账结果显示新旧框架的行数完全一致，差异只在旧框架多出的那部分重复数据上。

迁移步骤。第一步，在 staging 上用上个月的数据完整跑一遍新框架，对比新旧结果的行数和校验和。
第二步，新旧框架并行运行一周，只用新框架的结果做对账，不对外展示。
第三步，切换看板的数据源，旧框架保留两周后下线。整个过程由陈静负责，赵磊负责对账脚本。

监控与告警。新框架为每个回填任务输出四个指标：已处理批次、每批耗时、拒收记录数和距离上游最新分区的延迟。
任意一个批次耗时超过过去七天中位数的三倍，或者拒收比例超过百分之一，都会发出告警。
告警消息中会附上最近一次成功提交的批次号，方便值班同学判断是否需要人工介入。

对其他团队的影响。Atlas 和 Pulse 都依赖 Harbor 的输出，切换期间我们每天早上发一份对账结果到共享频道，
任何差异都会标注原因。Pulse 团队提出希望拿到每个分区的就绪时间，我们已经把它写进 backfill_state 表，
供看板直接读取。

遗留问题。目前 backfill_state 表没有清理机制，时间长了会越来越大，需要加一个按月归档的任务。
另外部分老任务的自然键定义并不唯一，需要和业务方确认后再迁移；在确认之前，这些任务继续使用旧框架运行。
"""),
    ("team-beta", "pulse-dashboard", "plan", 40.0, "zh", """
Pulse 运营看板第二阶段计划（负责人：孙悦，参与：周杰、Henry，11 月 22 日讨论确定）。

第一阶段回顾。第一阶段上线了任务总量、完成率和平均耗时三个面板，基本满足了日常查看的需要。
但在 12 月初那次限流事故中，大家发现看板几乎帮不上忙：它能显示失败数在上升，却看不出失败集中在哪个失败类别、
哪个服务、哪个供应商 key，值班同学只能去翻日志。第二阶段的目标，就是让看板能回答“出了什么问题、影响多大、
该找谁”这三个问题。

新增面板。一、按失败类别（NETWORK、RATE_LIMIT、BILLING_CAP、AUTH、TIMEOUT、RESOURCE、DATA、LOGIC）
拆分的失败率趋势，支持按 owner 和项目筛选。二、每个供应商 key 的剩余限流额度和 429 比例，
额度低于百分之二十时标红。
三、费用面板：本月已花费、按当前速度预测的月底花费，以及与账单上限的距离。
四、系统性故障时间线：把 systemic_failure、rca_request 和 escalation 事件按时间排列，点击可以看到关联的任务。

数据来源。所有面板的数据都来自事件表和任务表，不再单独埋点。为了保证查询速度，
我们会为最近 72 小时的事件建一个物化视图，每分钟刷新一次；更早的数据按天聚合。
事件 payload 里的 failure_class、service 和 severity 字段需要统一命名，这一点要和 Harbor 团队一起改。

告警联动。看板本身不负责告警，但每个面板都要能一键跳转到对应的告警规则。
失败率面板在同一失败类别 15 分钟内超过 10 次时，会自动关联上系统性故障事件，
值班同学打开看板就能看到 RCA 草稿的链接，不需要再去聊天记录里找。

排期。第一周完成物化视图和失败类别面板；第二周完成限流和费用面板；
第三周做系统性故障时间线，并请两位值班同学试用一周收集反馈。孙悦负责整体进度，周杰负责数据层，Henry 负责前端。
如果 Harbor 的字段统一不能按时完成，费用面板顺延一周，其余面板不受影响。

指标口径。失败率统一定义为一个小时内状态变为 failed 的任务数除以同期结束的任务总数，取消的任务不计入分母。
同一个任务多次重试只算一次失败，以最后一次的失败类别为准。费用按网关记录的实际 token 数和当月价格计算，
不使用供应商账单的估算值，因为账单通常要延迟一天才能拿到。所有口径写进看板的说明页，
修改口径需要孙悦和财务同时确认。

权限设计。看板按 owner 划分数据，每个团队默认只能看到自己的任务、事件和费用；
值班角色可以看到全部 owner 的汇总数据，但看不到具体的任务标题和对话内容。管理员视图单独部署，只对平台组开放。
这样既能在系统性故障时看到全局影响，又不会把某个团队的业务细节暴露给其他团队。

与第一阶段的关系。第一阶段的三个面板保留不变，只是数据源从临时脚本切换到新的物化视图。
切换期间两套数据并行展示一周，如果差异超过百分之一，就先排查口径问题再继续推进。

用户反馈。在计划讨论会上，值班同学提了三条意见：希望能按时间段对比两次事故，希望告警消息里直接带上看板链接，
希望移动端也能查看关键指标。前两条纳入本阶段，移动端放到下个季度再评估。

验收方式。每个面板上线前，由两位值班同学用上个月的真实事故做一次回放，确认能在面板上看出问题所在。

风险。物化视图每分钟刷新可能给数据库带来额外压力，需要先在 staging 上压测；
另外 owner 隔离必须在视图层面保证，不能依赖前端过滤，否则一个配置错误就可能让一个团队看到另一个团队的数据。

成功标准。第二阶段上线后，值班同学应当能在五分钟内回答三个问题：当前失败主要属于哪个类别；
影响了哪些 owner 和项目；是否与最近的发布、凭证轮换或者账单上限有关。
我们会在上线一个月后做一次回访，如果值班同学仍然需要先翻日志才能判断问题类型，
就说明面板设计没有达到目标，需要重新梳理。
"""),
    ("team-alpha", "atlas-search", "insight", 22.0, "zh", """
事故复盘：Atlas 检索服务数据库连接池耗尽（12 月 10 日，执笔：刘洋，参与：张伟、Alice）。

概述。12 月 9 日晚上 21 点 05 分到 21 点 50 分，Atlas 检索接口大面积报错，
agent 在开始任务前拿不到相关经验和项目记忆，
期间共有 286 个任务以 RESOURCE 类别失败。错误日志里最多的是 QueuePool limit of size 20 overflow 0 reached，
同时 Postgres 日志里出现了 sorry, too many clients already。

时间线。21 点整，Harbor 的夜间回填和 Atlas 的索引重建同时开始。21 点 05 分，
检索接口的 p95 从 40 毫秒升到 3 秒，
随后开始出现连接超时。21 点 12 分，系统性故障检测器在 15 分钟内收到四十多个同类失败事件，
触发告警并自动创建了 RCA 请求。
21 点 20 分，值班的张伟发现数据库 CPU 只有百分之三十，但连接数已经打满。21 点 35 分，暂停了索引重建任务，
连接数开始下降。21 点 50 分，服务恢复正常。

根因。每个 agent 进程都自己创建连接池，池大小为 20，而我们一共有 14 个 agent 进程、
两个检索服务实例和若干批处理任务，
高峰期理论上需要的连接数远超 max_connections 的 200。平时因为流量分散没有问题，一旦回填和索引重建同时开始，
大量连接被长时间占用，新请求只能排队直到超时。CPU 并不忙，瓶颈完全在连接数这个资源上。

影响评估。受影响的 286 个任务中，有 241 个在服务恢复后自动重试成功，另外 45 个因为超过了截止时间被标记为失败，
其中包括 team-beta 的 12 个数据任务。没有数据丢失，但有三位用户在对话中反馈回答明显变慢，
客服 agent 已经逐一回复并说明了原因。这次事故也暴露出我们对连接数缺乏监控：过去一个月连接数多次接近上限，
却没有任何告警。

改进措施。一、在 Postgres 前部署事务模式的 PgBouncer，所有应用改为连接 PgBouncer，
连接池大小按进程而不是按 agent 计算（负责人：张伟，12 月 12 日完成）。
二、索引重建和大批量回填不得在同一时间窗口运行，排期统一登记到共享日历（负责人：Alice）。
三、连接数超过 max_connections 的百分之八十时告警（负责人：刘洋）。
四、检索接口在拿不到连接时快速失败并返回空结果，而不是让 agent 等待 30 秒。

后续跟踪。改进措施完成后，我们在 staging 上重现了同样的负载：同时启动回填和索引重建，
并用压测工具模拟 300 rps 的检索流量。在 PgBouncer 的事务模式下，数据库实际连接数稳定在 60 左右，
检索接口 p95 保持在 45 毫秒以内，没有出现任何连接超时。

讨论中的分歧。复盘会上对第四条改进措施有不同意见。Alice 认为检索失败时返回空结果，
会让 agent 在没有任何经验的情况下执行任务，可能重复犯已知的错误；张伟认为让任务卡住 30 秒再失败更糟糕，
而且大部分任务即使没有注入经验也能正常完成。最后的折中方案是：检索超时设为 800 毫秒，
超时后返回空结果并在任务元数据中标记 memory_unavailable，任务完成后由 learning_extractor 重点检查这些任务，
如果失败且原因与已有经验相符，就提高该经验的权重。

监控补充。除了连接数告警，我们还在看板上新增了三个指标：PgBouncer 的等待客户端数、每个数据库角色的活跃连接数，
以及检索接口的超时比例。检索超时比例超过百分之一时发出告警，并自动关联最近一小时内启动的批处理任务，
方便值班同学判断是不是又有重任务撞车。

类似问题排查。复盘后我们检查了其他服务，发现 Ledger 计费服务也存在按 agent 建连接池的写法，
只是因为流量小还没有出问题，已经一并改为通过 PgBouncer 连接。Harbor 的批处理任务原来每个 worker 开 10 个连接，
实际最多只用到 2 个，也已经调小。另外，我们把 max_connections 从 200 临时调到 300，
但这只是缓冲，根本的解决办法仍然是连接复用。

沟通。事故期间客服 agent 按照预案给受影响的用户发送了说明，中文用户收到中文说明，英文用户收到英文说明，
内容只讲影响和预计恢复时间，不承诺具体的补偿方案。

经验。数据库连接是比 CPU 更容易被忽视的资源。看到大量超时时，先看连接数和锁等待，再看 CPU。
另外，agent 获取不到经验时应该能继续执行任务，检索失败不应该导致任务失败。
"""),
    ("team-alpha", "relay-gateway", "development", 100.0, "zh", """
Relay 网关统一 OAuth 接入开发记录（李娜，9 月 23 日更新）。

目标。过去每个 agent 各自保存第三方服务的访问令牌，GitHub、飞书和 Google 的凭证散落在十几个环境变量里，
令牌过期、轮换和权限变更都要逐个处理。这次开发把所有 OAuth 相关逻辑收拢到 Relay 网关：
agent 只拿一个内部服务令牌调用网关，由网关负责获取、缓存、刷新第三方令牌，并在失败时给出明确的失败类别。

实现。授权采用带 PKCE 的授权码流程，回调地址统一为网关域名下的 /oauth/callback。
state 参数写入服务端会话并设置十分钟过期，cookie 使用 SameSite=Lax，
解决了之前 Strict 模式下跨站跳转丢失 state 的问题。
访问令牌缓存在 Postgres 的 oauth_tokens 表中，字段包括 owner、provider、scope、过期时间和加密后的令牌。
刷新在过期前 60 秒触发；为了避免轮换模式下两个 worker 同时刷新导致 invalid_grant，
刷新操作先对该行加 SELECT FOR UPDATE 锁，新令牌的写入与旧令牌的作废在同一事务中完成。

错误处理。网关把第三方返回的错误统一映射为失败类别：401 和 invalid_grant 映射为 AUTH；
带 Retry-After 的 429 以及 GitHub 的二级限流映射为 RATE_LIMIT；402 和额度不足映射为 BILLING_CAP；
连接重置和 DNS 错误映射为 NETWORK。AUTH 类错误只在刷新令牌后重试一次，仍然失败就标记为需要重新授权，
并通知对应 owner 的负责人。

遇到的问题。第一，飞书的令牌有效期只有两小时，而且刷新令牌只能用一次，
测试环境里多个实例共享同一个应用时经常互相把令牌刷掉，最后给测试环境单独注册了一个应用。
第二，GitHub App 在组织策略调整后丢失了 contents:write 权限，表现为 403 而不是 401，排查了大半天。
现在网关在启动时会检查每个 provider 实际授予的 scope，与配置不一致时直接告警。
第三，令牌加密用的密钥轮换后，旧数据需要重新加密，我们写了一个后台任务分批处理，每批一千行，
全程不影响线上请求。

测试。单元测试覆盖了过期、刷新失败、并发刷新和权限不足四种场景；
集成测试使用模拟的 OAuth 服务器，验证了完整的授权和刷新流程，包括刷新令牌被撤销后的重新授权。
上线前在 staging 运行了一周，期间没有出现令牌相关的失败，刷新请求的平均耗时约 180 毫秒。

上线情况。9 月 18 日起先把 coder-agent 和 reviewer-agent 切到网关，观察三天没有问题后，
其余 agent 在 9 月 21 日全部切换。切换后认证类失败从每周二十多次降到两次，这两次都是用户主动撤销了授权。

权限与审计。网关为每一次第三方调用记录 owner、provider、使用的 scope 和调用方 agent，
写入 oauth_audit 表，保留九十天。审计 agent 每周检查一次：是否有 agent 使用了超出其职责范围的权限，
是否有长期未使用却仍然有效的授权，以及是否有令牌在短时间内被频繁刷新。
第一次检查就发现两个早已下线的实验 agent 仍然持有 GitHub 的写权限，已经全部撤销。

性能与可用性。令牌缓存命中时，网关额外增加的延迟在 2 毫秒以内；缓存未命中需要刷新时，平均增加约 180 毫秒。
为了避免网关成为单点，我们部署了三个实例，令牌状态全部保存在 Postgres 中，任何一个实例宕机都不会影响授权状态。
如果 Postgres 本身不可用，网关会使用内存中最近一次成功获取的令牌继续服务五分钟，同时发出告警。

经验总结。把认证逻辑集中起来，最大的收益不是少写代码，而是失败变得可以解释：
以前一个 403 可能来自令牌过期、权限缺失或者限流，每个 agent 的处理方式都不一样；
现在网关统一给出失败类别，经验库里积累的认证失败经验也能被所有 agent 复用，
新接入的 agent 不需要再踩一遍同样的坑。

文档与培训。开发完成后，我们为每个 agent 的负责人准备了一页接入说明，讲清楚如何申请授权、如何查看令牌状态，
以及遇到认证失败时应该先看哪里。九月最后一周组织了两次线上分享，录像放在团队知识库中，新同学入职时必须看完。

后续计划。下一步把 Slack 和 Stripe 的凭证也迁移到网关，并提供一个管理页面，
让负责人可以看到每个 owner 已授权的服务、权限范围和最近一次刷新时间。
"""),
    ("team-beta", "sentinel-qa", "plan", 12.0, "zh", """
Sentinel 端到端测试策略（第二版，王芳，12 月 20 日）。

为什么要改。第一版策略主要依赖单元测试和少量集成测试，端到端测试只覆盖登录和任务创建两个流程。
最近两个月线上出现的问题里，有一半是单元测试无法发现的：OAuth 回调丢失 state、检索接口漏掉 owner 过滤、
调度器时区错误导致报表晚发、回填任务重启后产生重复数据。这些问题都发生在组件之间的衔接处，
只有端到端测试才能覆盖。

测试分层。第一层是单元测试，要求在两分钟内跑完，不依赖数据库以外的外部服务。
第二层是集成测试，每个 worker 从模板库克隆一个独立数据库，使用真实的 Postgres 和 pgvector，
外部 API 全部使用录制的响应。
第三层是端到端测试，在 staging 上运行，覆盖八条关键路径：登录授权、任务创建与分派、经验检索与注入、
失败分类与系统性故障检测、回填与断点续跑、账单上限保护、看板数据一致性，以及 owner 隔离。

关键用例。owner 隔离用例会创建两个内容完全相同的 owner，在向量检索、
全文检索和混合检索三条路径上分别以对方身份查询，
任何一条返回了对方的数据都视为严重失败。跨语言用例会写入一对中英文含义相同的经验，
用中文查询必须能检索到英文条目，反之亦然。失败分类用例会模拟 401、429、402、连接重置和语句超时，
检查每种错误是否被映射为正确的失败类别，以及是否按类别执行了正确的重试策略。

不稳定测试的处理。任何在代码没有变化时失败两次的测试，会在 24 小时内被自动隔离，并创建后续任务指定负责人。
隔离的测试仍然运行并上报结果，但不阻塞合并。每周一由质量负责人检查隔离列表，
超过两周没有处理的测试要在周会上说明原因。

环境和数据。端到端测试使用固定的演示语料，包含三个 owner、数百条任务和经验，以及中英文混合的项目记忆。
语料由脚本生成，使用固定的随机种子，保证每次运行的数据完全一致，便于比较前后两次的结果。
staging 环境每天凌晨重置一次，测试开始前会校验语料的版本号，版本不一致时直接失败，避免在脏数据上得出错误结论。

分工。王芳负责测试框架和隔离用例，黄敏负责跨语言和失败分类用例，Ivan 负责 staging 环境的重置脚本。
qa-agent 负责每天汇总结果，并在失败时自动创建任务，附上失败用例、日志尾部和最近合入的 PR 列表。

与经验库的结合。端到端测试失败时，qa-agent 会先在经验库中检索与失败信息相近的条目，
如果找到同一失败类别的已知问题，例如 GitHub API 的 RATE_LIMIT 或者测试环境凭证过期导致的 AUTH 失败，
就在任务中附上该经验并降低优先级；如果没有找到，则视为新问题，提高优先级并通知测试负责人。
这样可以避免大家反复排查同一类环境问题，把精力留给真正的回归。

执行节奏。单元测试和集成测试在每次提交时运行；端到端测试在每次合入 main 后运行一次，
另外每天凌晨在重置后的 staging 上完整运行一遍。发布前必须有一次完整的端到端测试通过记录，
且时间不早于发布前六小时。

成本控制。端到端测试会真实调用向量模型，每次完整运行约花费 3 美元。为了避免在测试中触发账单上限，
测试使用单独的供应商 key，并设置每月 200 美元的硬上限；接近上限时只运行关键路径用例。
这部分费用由质量平台的预算承担，每月初在周会上回顾一次。

培训。每位新加入的同学在第一周都要独立跑通一次完整的端到端测试，并修复一个已隔离的不稳定测试。

验收标准。第二版策略上线后，我们希望在一个季度内做到：端到端测试的通过率不低于百分之九十五，
需要人工重跑 CI 的合并请求比例低于百分之五，并且线上出现的问题中，能被现有测试复现的比例超过一半。
"""),
]

# --------------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------------

# owner -> number of events (< 24 h, 24..72 h, 72 h..30 d); incident clusters come on top
EVENT_QUOTAS = {"team-alpha": (58, 55, 75), "team-beta": (35, 33, 45), "solo-gamma": (10, 10, 16)}
EVENT_WEIGHTS = {
    "task_failed": 22, "task_completed": 28, "task_created": 20, "alert": 12, "layer2_health": 8,
    "escalation": 4, "systemic_failure": 3, "rca_request": 3,
}
ALERT_METRICS: list[tuple[str, tuple[int, int], int, Pair]] = [
    ("http_5xx_rate_pct", (3, 18), 2, ("5xx rate on {service} at {v}% (threshold {t}%)",
                                       "{service} 5xx 比例 {v}%，超过阈值 {t}%")),
    ("p95_latency_ms", (450, 3200), 300, ("p95 latency of {service} is {v} ms (threshold {t} ms)",
                                          "{service} p95 延迟 {v} ms，超过阈值 {t} ms")),
    ("db_connections_used_pct", (82, 100), 80, ("Postgres connections at {v}% of max_connections",
                                                "Postgres 连接数已达 max_connections 的 {v}%")),
    ("rate_limit_headroom_pct", (1, 19), 20, ("Rate limit headroom for {provider} down to {v}%",
                                              "{provider} 剩余限流额度只有 {v}%")),
    ("monthly_spend_pct", (80, 99), 80, ("Spend on the {provider} key at {v}% of the monthly billing cap",
                                         "{provider} 本月花费已达账单上限的 {v}%")),
    ("memory_rss_mb", (1700, 2040), 1600, ("{service} RSS at {v} MB, approaching the 2 GiB limit",
                                           "{service} 内存 RSS {v} MB，接近 2 GiB 上限")),
    ("disk_used_pct", (81, 97), 80, ("Disk on ci-runner-2 at {v}%", "ci-runner-2 磁盘占用 {v}%")),
]
HEALTH_COMPONENTS = ["retrieval", "embedding_queue", "event_ingest", "learning_extractor", "scheduler"]
HEALTH_MESSAGES: dict[str, list[Pair]] = {
    "ok": [("{component} healthy", "{component} 运行正常")],
    "degraded": [
        ("{component} degraded: queue depth {q}, p95 {p} ms",
         "{component} 性能下降：队列深度 {q}，p95 {p} ms"),
        ("{component} slow, error rate {e}", "{component} 变慢，错误率 {e}"),
    ],
    "down": [("{component} not responding to health checks", "{component} 健康检查无响应")],
}
ESCALATION_REASONS: list[Pair] = [
    ("failed 3 times with the same error", "同一错误连续失败 3 次"),
    ("needs human re-consent for OAuth", "需要人工重新进行 OAuth 授权"),
    ("billing cap raise needs approval", "提高账单上限需要审批"),
    ("customer asked for a human", "客户要求人工处理"),
    ("deadline at risk", "截止时间有风险"),
]


def _weighted(rng: random.Random, weights: dict[str, int]) -> str:
    names = list(weights)
    return rng.choices(names, weights=[weights[n] for n in names])[0]


def _lang(rng: random.Random) -> str:
    return rng.choice(LANGS)


# --------------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------------


def _task_spec(rng: random.Random, owner: str, topic: dict[str, Any] | None = None) -> dict[str, Any]:
    if topic is None:
        topic = rng.choices(TASK_TOPICS, weights=[t["weight"] for t in TASK_TOPICS])[0]
    status = _weighted(rng, STATUS_WEIGHTS)
    age = rng.uniform(0.1, 60.0) if status in ("pending", "in_progress") else rng.uniform(0.5, 179.5)
    project = rng.choice(OWNER_PROJECTS[owner])
    fc = rng.choice(topic["fail"]) if status == "failed" else None
    ti = rng.randrange(len(topic["titles"]))
    return {
        "topic": topic, "owner": owner, "project": project, "status": status, "age": round(age, 2),
        "ti": ti, "di": rng.randrange(len(topic["descs"])) if topic.get("mix") else ti,
        "task_type": rng.choice(topic["types"]), "fc": fc,
        "error": rng.choice(ERRORS[fc]) if fc else None,
        "note": rng.choice(STATUS_NOTES[status]) if status in STATUS_NOTES and rng.random() < 0.5 else None,
        "slots": base_slots(rng, project, age),
    }


def _render_task(spec: dict[str, Any], lang: str, meta: dict[str, Any] | None = None,
                 title_suffix: str = "", extra_note: Pair | None = None) -> dict[str, Any]:
    topic = spec["topic"]
    s = localize(spec["slots"], lang)
    title = render(topic["titles"][spec["ti"]], lang, s) + title_suffix
    parts = [render(topic["descs"][spec["di"]], lang, s)]
    metadata: dict[str, Any] = {"repo": s["repo"], "assignee": s["person"], "service": s["service"]}
    if spec["task_type"] in ("dev", "review", "qa"):
        metadata["pr_number"] = s["pr"]
    if spec["fc"]:
        error = spec["error"].format_map(s)
        parts.append(render(FAILED_NOTE, lang, {**s, "error": error}))
        metadata["failure_class"] = spec["fc"]
        metadata["error"] = error
    if spec["note"]:
        parts.append(render(spec["note"], lang, s))
    if extra_note:
        parts.append(render(extra_note, lang, s))
    metadata.update(meta or {})
    sep = "" if lang == "zh" else " "
    return {
        "owner": spec["owner"], "title": title, "description": sep.join(parts),
        "task_type": spec["task_type"], "status": spec["status"], "project_key": spec["project"],
        "metadata": metadata, "age_days": spec["age"],
    }


def build_tasks(rng: random.Random) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = []
    seen: set[str] = set()

    def fresh(owner: str, topic: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
        """A task spec whose title was not used yet (only the marked duplicates may repeat a title)."""
        while True:
            spec, lang = _task_spec(rng, owner, topic), _lang(rng)
            titles = {_render_task(spec, other)["title"] for other in LANGS}
            if not titles & seen:
                seen.update(titles)
                return spec, lang

    for owner, count in (("team-alpha", 178), ("team-beta", 106), ("solo-gamma", 36)):
        for _ in range(count):
            spec, lang = fresh(owner)
            tasks.append(_render_task(spec, lang))

    # bilingual task pairs: the same ticket filed once in each language
    topics = {t["name"]: t for t in TASK_TOPICS}
    for i, name in enumerate(TASK_PAIR_TOPICS, start=1):
        owner = "team-alpha" if i % 3 else "team-beta"
        spec, _ = fresh(owner, topics[name])
        meta = {"pair": f"tp{i:02d}"}
        tasks.append(_render_task(spec, "en", meta))
        twin = dict(spec, age=round(max(0.05, spec["age"] - rng.uniform(0.01, 0.5)), 2))
        tasks.append(_render_task(twin, "zh", meta))

    # near-duplicates: the same bug re-filed once or twice, days later
    dup_plan = [("team-alpha", 3), ("team-alpha", 2), ("team-alpha", 2), ("team-beta", 3), ("team-beta", 2),
                ("team-alpha", 2), ("solo-gamma", 2)]
    for g, (owner, size) in enumerate(dup_plan, start=1):
        spec, lang = fresh(owner)
        spec["age"] = round(rng.uniform(20, 170), 2)
        meta = {"dup_group": f"d{g}"}
        tasks.append(_render_task(spec, lang, meta))
        age = spec["age"]
        for j in range(1, size):
            age = round(max(0.1, age - rng.uniform(1.0, 12.0)), 2)
            status = rng.choice(["pending", "in_progress", "cancelled"])
            variant = dict(spec, age=age, status=status, note=None, fc=None)
            suffix = DUP_TITLE_SUFFIX[j % len(DUP_TITLE_SUFFIX)][LANGS.index(lang)]
            tasks.append(_render_task(variant, lang, meta, title_suffix=suffix, extra_note=DUP_DESC_NOTE))

    tasks.sort(key=lambda t: -t["age_days"])  # keys follow creation order
    return [{"key": f"task-{i:04d}", **t} for i, t in enumerate(tasks, start=1)]


def _learning(tpl: dict[str, Any], owner: str, lang: str, slots: dict[str, Any], task_type: str,
              trigger: str | None, meta: dict[str, Any]) -> dict[str, Any]:
    s = localize(slots, lang)
    return {
        "owner": owner, "title": render(tpl["t"], lang, s), "content": render(tpl["c"], lang, s),
        "task_type": task_type, "failure_class": tpl["fc"], "trigger_event": trigger, "category": tpl["cat"],
        "metadata": meta, "age_days": round(slots["age_days"], 2),
    }


def build_learnings(rng: random.Random) -> list[dict[str, Any]]:
    learnings: list[dict[str, Any]] = []
    for pair_id, name, owner in LEARNING_PAIRS:
        tpl = LEARNING_TEMPLATES[name]
        age = rng.uniform(1.0, 178.0)
        slots = base_slots(rng, rng.choice(OWNER_PROJECTS[owner]), age)
        task_type, trigger = rng.choice(tpl["types"]), rng.choice(tpl["trig"])
        first = rng.choice(LANGS)
        learnings.append(_learning(tpl, owner, first, slots, task_type, trigger, {"pair": pair_id}))
        slots = dict(slots, age_days=max(0.05, age - rng.uniform(0.0, 3.0)))
        second = "zh" if first == "en" else "en"
        learnings.append(_learning(tpl, owner, second, slots, task_type, trigger, {"pair": pair_id}))

    # single learnings never reuse a pair's template, so that a pair's closest match is its translation
    paired = {name for _, name, _ in LEARNING_PAIRS}
    names = [name for name in LEARNING_TEMPLATES if name not in paired]
    order: list[str] = []
    while len(order) < 142:  # every template about 3 times, in shuffled rounds
        rnd = names[:]
        rng.shuffle(rnd)
        order.extend(rnd)
    for i, name in enumerate(order[:142]):
        tpl = LEARNING_TEMPLATES[name]
        owner = ("team-alpha", "team-alpha", "team-alpha", "team-beta", "team-beta", "solo-gamma")[i % 6]
        slots = base_slots(rng, rng.choice(OWNER_PROJECTS[owner]), rng.uniform(0.2, 179.8))
        # cycle through the template's task types so every type is well represented
        task_type = tpl["types"][(i // len(names)) % len(tpl["types"])]
        learnings.append(_learning(tpl, owner, _lang(rng), slots, task_type, rng.choice(tpl["trig"]), {}))

    learnings.sort(key=lambda x: -x["age_days"])
    return [{"key": f"learning-{i:04d}", **x} for i, x in enumerate(learnings, start=1)]


def build_capabilities(rng: random.Random) -> list[dict[str, Any]]:
    caps = [{"owner": o, "name": n, "description": d, "age_days": round(rng.uniform(60.0, 180.0), 2)}
            for o, n, d in CAPABILITIES]
    for cap in caps[::4]:  # a few capabilities were added recently
        cap["age_days"] = round(rng.uniform(0.5, 40.0), 2)
    return [{"key": f"cap-{i:03d}", **c} for i, c in enumerate(caps, start=1)]


def build_goals() -> list[dict[str, Any]]:
    return [
        {"key": f"goal-{i:02d}", "owner": o, "title": t, "description": d, "status": st, "priority": p,
         "progress": pr, "age_days": age}
        for i, (o, t, d, st, p, pr, age) in enumerate(GOALS, start=1)
    ]


def _prose(text: str, lang: str) -> str:
    sep = "" if lang == "zh" else " "
    paragraphs = [p for p in text.strip().split("\n\n") if p.strip()]
    return "\n\n".join(sep.join(line.strip() for line in p.splitlines()) for p in paragraphs)


def build_memories(rng: random.Random) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []

    def add(owner: str, project: str, content_type: str, content: str, age: float) -> None:
        items.append({"owner": owner, "project_key": project, "project_name": PROJECT_NAMES[project],
                      "content_type": content_type, "content": content, "age_days": round(age, 2)})

    for owner, project, ct, age, lang, text in LONG_MEMORIES:
        add(owner, project, ct, _prose(text, lang), age)
    for owner, project, ct, versions in MEMORY_UPDATES:
        for age, text in versions:
            add(owner, project, ct, text, age)

    memory_projects = {"team-alpha": ["atlas-search", "relay-gateway", "ledger-billing"],
                       "team-beta": ["harbor-etl", "sentinel-qa", "pulse-dashboard"],
                       "solo-gamma": ["notes-bot"]}
    for owner, count in (("team-alpha", 17), ("team-beta", 14), ("solo-gamma", 8)):
        for i in range(count):
            project = memory_projects[owner][i % len(memory_projects[owner])]
            ct = CONTENT_TYPES[(i + len(items)) % len(CONTENT_TYPES)]
            age = rng.uniform(0.3, 179.0)
            lang = _lang(rng)
            s = localize(base_slots(rng, project, age), lang)
            add(owner, project, ct, render(rng.choice(SHORT_MEMORIES[ct]), lang, s), age)

    items.sort(key=lambda m: -m["age_days"])
    return [{"key": f"mem-{i:03d}", **m} for i, m in enumerate(items, start=1)]


AGENT_FOR_TYPE = {
    "dev": "coder-agent", "review": "reviewer-agent", "qa": "qa-agent", "audit": "auditor-agent",
    "research": "research-agent", "talk": "concierge-agent", "data": "etl-agent",
}
HEALTH_RANGES = {  # status -> (queue depth, p95 ms, error rate) ranges
    "ok": ((0, 150), (18, 140), (0.0, 0.008)),
    "degraded": ((400, 4000), (450, 2600), (0.02, 0.15)),
    "down": ((5000, 20000), (30000, 30000), (0.9, 1.0)),
}


def _recent_tasks(pool: list[dict[str, Any]], age_hours: float) -> list[dict[str, Any]]:
    """Tasks that already existed when the event happened, preferring ones created shortly before it."""
    days = age_hours / 24
    return [t for t in pool if days <= t["age_days"] <= days + 45] or pool


def _event_payload(rng: random.Random, etype: str, owner: str, tasks: list[dict[str, Any]],
                   lang: str, age_hours: float) -> dict[str, Any]:
    own = [t for t in tasks if t["owner"] == owner]
    by_status = {st: _recent_tasks([t for t in own if t["status"] == st], age_hours) for st in TASK_STATUSES}
    s = localize(base_slots(rng, own[0]["project_key"], 1.0), lang)
    i = LANGS.index(lang)
    if etype == "task_failed":
        t = rng.choice(by_status["failed"] or own)
        fc = t["metadata"].get("failure_class") or rng.choice(FAILURE_CLASSES)
        error = t["metadata"].get("error") or rng.choice(ERRORS[fc]).format_map(s)
        return {"task_id": t["key"], "title": t["title"], "task_type": t["task_type"], "failure_class": fc,
                "error": error, "service": t["metadata"]["service"], "attempt": rng.randint(1, 4)}
    if etype == "task_completed":
        t = rng.choice(by_status["completed"] or own)
        return {"task_id": t["key"], "title": t["title"], "task_type": t["task_type"],
                "duration_s": round(rng.uniform(4.0, 1800.0), 1), "agent": AGENT_FOR_TYPE[t["task_type"]]}
    if etype == "task_created":  # one of the tasks created closest to the event time
        t = rng.choice(sorted(own, key=lambda x: abs(x["age_days"] * 24 - age_hours))[:4])
        creator = rng.choice(["planner-agent", "planner-agent", s["person"], AGENT_FOR_TYPE[t["task_type"]]])
        return {"task_id": t["key"], "title": t["title"], "task_type": t["task_type"],
                "created_by": creator, "priority": rng.randint(0, 3)}
    if etype == "alert":
        metric, (lo, hi), threshold, msg = rng.choice(ALERT_METRICS)
        value = rng.randint(lo, hi)
        severity = "critical" if value >= (lo + hi) / 2 else "warning"
        return {"service": s["service"], "severity": severity, "metric": metric, "value": value,
                "threshold": threshold, "message": msg[i].format(service=s["service"], provider=s["provider"],
                                                                 v=value, t=threshold)}
    if etype == "layer2_health":
        status = rng.choices(["ok", "degraded", "down"], weights=[70, 25, 5])[0]
        comp = rng.choice(HEALTH_COMPONENTS)
        (q_lo, q_hi), (p_lo, p_hi), (e_lo, e_hi) = HEALTH_RANGES[status]
        q, p, e = rng.randint(q_lo, q_hi), rng.randint(p_lo, p_hi), round(rng.uniform(e_lo, e_hi), 3)
        msg = rng.choice(HEALTH_MESSAGES[status])[i].format(component=comp, q=q, p=p, e=e)
        return {"component": comp, "status": status, "latency_p95_ms": p, "error_rate": e, "queue_depth": q,
                "message": msg}
    if etype == "escalation":
        t = rng.choice(by_status["failed"] + by_status["in_progress"] or own)
        reason = rng.choice(ESCALATION_REASONS)[i]
        msg = f"{t['title']}: {reason}" if lang == "en" else f"{t['title']}：{reason}"
        return {"task_id": t["key"], "title": t["title"], "reason": reason, "escalated_to": s["person"],
                "severity": rng.choice(["high", "medium"]), "message": msg}
    failed = by_status["failed"] or own
    fc = rng.choice(FAILURE_CLASSES)
    related = [t["key"] for t in rng.sample(failed, min(len(failed), rng.randint(3, 6)))]
    if etype == "systemic_failure":
        count = rng.randint(4, 40)
        msg = (f"{count} tasks failed with {fc} within 15 minutes on {s['service']}" if lang == "en"
               else f"{s['service']} 在 15 分钟内有 {count} 个任务以 {fc} 失败")
        return {"failure_class": fc, "affected_tasks": related, "count": count, "window_minutes": 15,
                "service": s["service"], "severity": "critical", "message": msg}
    incident = f"INC-{rng.randint(100, 999)}"
    msg = (f"RCA requested for {incident} ({fc}) by {s['person']}" if lang == "en"
           else f"{s['person']} 请求对 {incident}（{fc}）做根因分析")
    return {"incident": incident, "failure_class": fc, "requested_by": s["person"], "related_tasks": related,
            "message": msg}


def _incident_events(rng: random.Random, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two coherent clusters: a 429 storm for team-alpha today, a pool exhaustion for team-beta yesterday."""
    events: list[dict[str, Any]] = []
    clusters = [
        ("team-alpha", "RATE_LIMIT", "relay-gateway", "HTTP 429 Too Many Requests (Retry-After: 20)",
         1.5, 5.5, 10),
        ("team-beta", "RESOURCE", "harbor-loader", "FATAL: sorry, too many clients already", 30.0, 33.5, 8),
    ]
    for owner, fc, service, error, start, end, n in clusters:
        own = [t for t in tasks if t["owner"] == owner and t["task_type"] in ("dev", "data")]
        picked = rng.sample(own, n)
        for t in picked:
            age = round(rng.uniform(start + 0.3, end), 2)
            events.append({"owner": owner, "type": "task_failed", "age_hours": age,
                           "payload": {"task_id": t["key"], "title": t["title"], "task_type": t["task_type"],
                                       "failure_class": fc, "error": error, "service": service,
                                       "attempt": rng.randint(1, 3)}})
        keys = [t["key"] for t in picked]
        events.append({"owner": owner, "type": "alert", "age_hours": round(start + 0.2, 2),
                       "payload": {"service": service, "severity": "critical",
                                   "metric": f"{fc.lower()}_errors",
                                   "value": n, "threshold": 5,
                                   "message": f"{n} {fc} errors on {service} in 15 minutes"}})
        events.append({"owner": owner, "type": "systemic_failure", "age_hours": round(start + 0.1, 2),
                       "payload": {"failure_class": fc, "affected_tasks": keys, "count": n,
                                   "window_minutes": 15,
                                   "service": service, "severity": "critical",
                                   "message": f"{service} 在 15 分钟内有 {n} 个任务以 {fc} 失败"}})
        events.append({"owner": owner, "type": "rca_request", "age_hours": round(start, 2),
                       "payload": {"incident": f"INC-{rng.randint(100, 999)}", "failure_class": fc,
                                   "requested_by": "incident.rca_writer", "related_tasks": keys,
                                   "message": f"Auto RCA requested: {fc} cluster on {service}"}})
    return events


def build_events(rng: random.Random, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events = _incident_events(rng, tasks)
    windows = [(0.05, 23.9), (24.1, 71.9), (72.5, 720.0)]
    for owner, quotas in EVENT_QUOTAS.items():
        for (lo, hi), count in zip(windows, quotas, strict=True):
            for _ in range(count):
                etype = _weighted(rng, EVENT_WEIGHTS)
                age = round(rng.uniform(lo, hi), 2)
                payload = _event_payload(rng, etype, owner, tasks, _lang(rng), age)
                events.append({"owner": owner, "type": etype, "age_hours": age, "payload": payload})
    events.sort(key=lambda e: -e["age_hours"])
    return [{"key": f"event-{i:04d}", **e} for i, e in enumerate(events, start=1)]


def build_corpus(seed: int = SEED) -> dict[str, Any]:
    rng = random.Random(seed)
    tasks = build_tasks(rng)
    corpus = {
        "owners": list(OWNERS),
        "tasks": tasks,
        "learnings": build_learnings(rng),
        "capabilities": build_capabilities(rng),
        "goals": build_goals(),
        "events": build_events(rng, tasks),
        "memories": build_memories(rng),
    }
    corpus["sessions"] = build_sessions(corpus)
    return corpus


# --------------------------------------------------------------------------------------------------
# Simulated agent sessions (the retrieval log of the demo)
# --------------------------------------------------------------------------------------------------
# Each session is one context build as an agent would ask it (a question about one corpus item, asked
# `age_days` before "now", in the item's language or, for bilingual twins, the other one) and what the
# agent finally produced: an answer that quotes or paraphrases the item (and sometimes a second one), an
# answer in the other language taken from the item's twin, or an answer about another topic that uses
# nothing. `uses` names the items the output really uses (the ground truth the implicit-feedback
# threshold is measured against, scripts/calibrate_implicit.py); the loader never reads it. A separate
# random stream, so the rest of the corpus is unchanged.

SESSION_SEED = SEED + 11
SESSION_COUNTS = {"team-alpha": 150, "team-beta": 110, "solo-gamma": 40}
SESSION_DAYS = 42.0  # six weeks of sessions
SESSION_STYLES = {"quote": 30, "paraphrase": 35, "translate": 20, "unrelated": 15}

Q_EN = ["{t}: what did we do last time?", "How should I handle this: {t}?", "Plan the fix for: {t}",
        "Before I start: {t}. Anything we learned?", "{t} - is there a known fix?"]
Q_ZH = ["{t}，上次是怎么处理的？", "怎么解决：{t}？", "开始之前：{t}，有什么经验？", "{t} 这个问题有已知的方案吗？"]
OPEN_EN = ["Based on what we saw before: ", "Here is the plan. ", "Short answer: ", "Checked our notes first. "]
OPEN_ZH = ["根据之前的经验：", "处理方案如下。", "简单说：", "先查了之前的记录。"]
CLOSE_EN = [" I'll apply this and report back.", " Opening a PR with the change now.", " Next: verify on staging.",
            " Ping me if the numbers differ."]
CLOSE_ZH = ["我会按这个处理并同步结果。", "我现在提交修改的 PR。", "下一步：在预发环境验证。", "数字不一致的话告诉我。"]
UNRELATED_EN = [
    "Updated the onboarding checklist for the new intern: laptop, VPN, repository access and the style guide.",
    "Drafted the quarterly newsletter: three customer stories, the hiring update and the office move date.",
    "Reformatted the README tables and fixed two broken links in the contributing guide.",
    "Booked the venue for the team offsite and sent the calendar invite with the agenda.",
]
UNRELATED_ZH = [
    "整理了新同事的入职清单：电脑、VPN、代码仓库权限和编码规范。",
    "起草了季度简报：三个客户故事、招聘进展和搬家日期。",
    "重新排版了 README 的表格，修复了贡献指南里的两个失效链接。",
    "预订了团建场地，并发出了带议程的日历邀请。",
]


def _text_of(item: dict[str, Any]) -> tuple[str, str]:
    """(title, body) of a task, learning or memory."""
    if "content_type" in item:
        body = item["content"]
        return body.split("。")[0].split(". ")[0][:80], body
    return item["title"], item.get("content") or item.get("description") or ""


def _split(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?。！？])\s*", text.strip())
    return [p.strip() for p in parts if p.strip()]


def _retell(rng: random.Random, item: dict[str, Any], style: str, lang: str) -> str:
    """The part of an answer that uses `item`: its sentences quoted, or kept in part and reordered."""
    title, body = _text_of(item)
    sents = _split(body) or [title]
    if style == "quote":
        k = min(len(sents), rng.randint(1, 2))
        start = rng.randrange(0, len(sents) - k + 1)
        lead = "我们的记录写着：" if lang == "zh" else "Our notes say: "
        return lead + ("" if lang == "zh" else " ").join(sents[start:start + k])
    keep = [s for s in sents if rng.random() < 0.7] or sents[:1]
    if len(keep) > 2:
        keep = keep[1:] + keep[:1]
    joiner = "" if lang == "zh" else " "
    head = (f"关于「{title}」：" if lang == "zh" else f"On \"{title}\": ")
    return head + joiner.join(keep)


def build_sessions(corpus: dict[str, Any]) -> list[dict[str, Any]]:
    rng = random.Random(SESSION_SEED)
    sessions: list[dict[str, Any]] = []
    styles = list(SESSION_STYLES)
    weights = list(SESSION_STYLES.values())
    for owner, n in SESSION_COUNTS.items():
        pool = {
            "learnings": [x for x in corpus["learnings"] if x["owner"] == owner],
            "tasks": [x for x in corpus["tasks"] if x["owner"] == owner],
            "memories": [x for x in corpus["memories"] if x["owner"] == owner],
        }
        twins: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for section in ("learnings", "tasks"):
            for x in pool[section]:
                if (pair := (x.get("metadata") or {}).get("pair")):
                    twins.setdefault((section, pair), []).append(x)
        others = [x for x in corpus["learnings"] if x["owner"] != owner]
        for _ in range(n):
            age = round(rng.uniform(0.3, SESSION_DAYS), 3)
            style = rng.choices(styles, weights=weights)[0]
            paired = [(sec, x) for (sec, _p), xs in sorted(twins.items(), key=lambda kv: kv[0])
                      for x in xs if len(xs) == 2 and all(y["age_days"] > age + 0.5 for y in xs)]
            if style == "translate" and paired:
                section, target = rng.choice(paired)
            else:
                style = "paraphrase" if style == "translate" else style
                section = rng.choices(["learnings", "tasks", "memories"], weights=[50, 30, 20])[0]
                choices = [x for x in pool[section] if x["age_days"] > age + 0.5] or \
                    [x for x in pool["learnings"] if x["age_days"] > age + 0.5]
                target = rng.choice(choices)
            pair = (target.get("metadata") or {}).get("pair")
            twin = next((x for x in twins.get((section, pair), []) if x is not target
                         and x["age_days"] > age + 0.5), None) if pair else None
            lang = "zh" if is_chinese(_text_of(target)[1]) else "en"
            out_lang = ("en" if lang == "zh" else "zh") if style == "translate" else lang
            q_lang = out_lang if rng.random() < 0.8 else lang
            q_item = twin if (twin is not None and q_lang != lang) else target
            q_lang = "zh" if is_chinese(_text_of(q_item)[1]) else "en"
            query = rng.choice(Q_ZH if q_lang == "zh" else Q_EN).format(t=_text_of(q_item)[0])
            mode = {"learnings": rng.choice(["debug", "debug", "execute", "plan"]),
                    "tasks": rng.choice(["execute", "execute", "plan", "debug"]),
                    "memories": rng.choice(["plan", "chat", "execute"])}[section]
            zh = out_lang == "zh"
            if style == "unrelated":
                other = rng.choice(others)
                body = rng.choice(UNRELATED_ZH if zh else UNRELATED_EN)
                output = body + ("" if zh else " ") + _retell(rng, other, "paraphrase",
                                                              "zh" if is_chinese(other["content"]) else "en")
                uses: list[str] = []
            else:
                source = twin if style == "translate" else target
                parts = [_retell(rng, source, "quote" if style == "quote" else "paraphrase", out_lang)]
                uses = [target["key"]] + ([twin["key"]] if twin is not None and style == "translate" else [])
                same = [x for x in pool["learnings"] if x is not target and x["age_days"] > age + 0.5
                        and x.get("failure_class") and x.get("failure_class") == target.get("failure_class")
                        and is_chinese(x["content"]) == zh]
                if same and rng.random() < 0.3:
                    second = rng.choice(same)
                    parts.append(_retell(rng, second, "paraphrase", out_lang))
                    uses.append(second["key"])
                output = rng.choice(OPEN_ZH if zh else OPEN_EN) + ("" if zh else " ").join(parts) + \
                    rng.choice(CLOSE_ZH if zh else CLOSE_EN)
            sessions.append({"key": f"session-{len(sessions) + 1:04d}", "owner": owner, "age_days": age,
                             "mode": mode, "query": query, "output": output, "style": style, "uses": uses})
    sessions += build_failure_sessions(corpus, start=len(sessions) + 1)
    sessions.sort(key=lambda x: (-x["age_days"], x["key"]))
    return sessions


# Failure sessions: an agent's task has just failed (a `task_failed`, `systemic_failure` or `rca_request` event of
# the corpus); the agent asks in
# debug mode with the service and the error it got, and fixes it with a learning of the same failure class
# (the lesson written after an earlier failure), which shares little of the error's wording. The failed
# events themselves, and other tasks failing the same way, match the question best and are never what the
# agent uses. A separate random stream, so the sessions above are unchanged.

FAILURE_SEED = SEED + 12
FAILURE_EVENTS = ("task_failed", "systemic_failure", "rca_request")  # the events that carry a failure class
FAILURE_Q_EN = ["{service}: {error}. How do I fix it?", "Task on {service} failed with `{error}`. What do we know?",
                "Debugging {service}: {error}"]
FAILURE_Q_ZH = ["{service} 报错：{error}，怎么修？", "{service} 上的任务失败了：{error}，有什么经验？",
                "排查 {service}：{error}"]


def _words(text: str) -> set[str]:
    """Lower-cased words of 3+ letters or digits (identifiers, codes), for picking a failure's lesson."""
    return {w for w in re.findall(r"[a-z0-9_]{3,}", text.lower()) if w not in {"the", "and", "for", "with"}}


def build_failure_sessions(corpus: dict[str, Any], start: int) -> list[dict[str, Any]]:
    rng = random.Random(FAILURE_SEED)
    out: list[dict[str, Any]] = []
    for event in corpus["events"]:
        payload = event["payload"]
        fclass = payload.get("failure_class")
        if event["type"] not in FAILURE_EVENTS or not fclass or event["age_hours"] < 0.5:
            continue
        error = payload.get("error") or payload["message"]
        age = round((event["age_hours"] - rng.uniform(0.1, 0.4)) / 24, 3)
        lang = "zh" if is_chinese(payload.get("title", "")) else "en"
        lessons = [x for x in corpus["learnings"] if x["owner"] == event["owner"]
                   and x.get("failure_class") == fclass and x["age_days"] > age + 0.5]
        if not lessons:
            continue
        # The lesson the agent would pick: the one sharing most words with the service and the error.
        words = _words(f"{payload.get('service', '')} {error}")
        overlap = {x["key"]: len(words & _words(f"{x['title']} {x['content']}")) for x in lessons}
        best = max(overlap.values())
        if best == 0:
            continue
        lesson = rng.choice([x for x in lessons if overlap[x["key"]] == best])
        out_lang = "zh" if is_chinese(lesson["content"]) else "en"
        zh = out_lang == "zh"
        service = payload.get("service") or ("失败分类 " if lang == "zh" else "failure class ") + fclass
        query = rng.choice(FAILURE_Q_ZH if lang == "zh" else FAILURE_Q_EN).format(service=service, error=error)
        output = rng.choice(OPEN_ZH if zh else OPEN_EN) + _retell(rng, lesson, "paraphrase", out_lang) + \
            rng.choice(CLOSE_ZH if zh else CLOSE_EN)
        out.append({"key": f"session-{start + len(out):04d}", "owner": event["owner"], "age_days": age,
                    "mode": "debug", "query": query, "output": output, "style": "failure",
                    "uses": [lesson["key"]]})
    return out


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------

_CJK = re.compile(r"[\u4e00-\u9fff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")
_SENTENCE_END = re.compile(r"(?<!\.)[.!?](?!\.)(?=\s|$)|[。！？]")


def is_chinese(text: str) -> bool:
    """Mostly Chinese: more CJK characters than Latin words (a few Chinese names do not count)."""
    return len(_CJK.findall(text)) > max(3, len(_LATIN_WORD.findall(text)))


def is_long(text: str) -> bool:
    return len(_CJK.findall(text)) >= 1200 if is_chinese(text) else len(text) >= 2500


def _sentences(text: str) -> int:
    return len(_SENTENCE_END.findall(text))


def _check_keys(items: list[dict[str, Any]], pattern: str) -> None:
    keys = [x["key"] for x in items]
    assert len(set(keys)) == len(keys), f"duplicate keys for {pattern}"
    assert all(re.fullmatch(pattern, k) for k in keys), f"bad key format, expected {pattern}"
    assert all(x["owner"] in OWNERS for x in items), "unknown owner"


def _check_ages(items: list[dict[str, Any]], name: str, spread: bool = True) -> None:
    ages = [x["age_days"] for x in items]
    assert all(isinstance(a, float) and 0 <= a <= 180 for a in ages), f"{name}: age_days outside 0..180"
    if spread:
        assert min(ages) < 15 and max(ages) > 150, f"{name}: ages not spread over six months"


def _check_pairs(items: list[dict[str, Any]], prefix: str, text_key: str, floor: int) -> dict[str, list]:
    pairs: dict[str, list[dict[str, Any]]] = {}
    for x in items:
        if "pair" in x["metadata"]:
            pairs.setdefault(x["metadata"]["pair"], []).append(x)
    assert len(pairs) >= floor, f"only {len(pairs)} {prefix} pairs"
    for pid, members in pairs.items():
        assert pid.startswith(prefix) and len(members) == 2, f"pair {pid} malformed"
        a, b = members
        assert a["owner"] == b["owner"] and a["task_type"] == b["task_type"], f"pair {pid} differs"
        langs = {is_chinese(a[text_key]), is_chinese(b[text_key])}
        assert langs == {True, False}, f"pair {pid} not bilingual"
    return pairs


def check(corpus: dict[str, Any]) -> None:
    """Assert every floor and enumeration the tests rely on; raises AssertionError."""
    for table in (*(t["titles"] + t["descs"] for t in TASK_TOPICS),
                  *([t["t"], t["c"]] for t in LEARNING_TEMPLATES.values())):
        assert all(isinstance(pair, tuple) and len(pair) == 2 for pair in table), table
    assert corpus["owners"] == OWNERS
    tasks, learnings, caps = corpus["tasks"], corpus["learnings"], corpus["capabilities"]
    goals, events, memories = corpus["goals"], corpus["events"], corpus["memories"]

    # tasks
    assert len(tasks) >= 320, len(tasks)
    _check_keys(tasks, r"task-\d{4}")
    _check_ages(tasks, "tasks")
    per_owner = Counter(t["owner"] for t in tasks)
    assert per_owner["team-alpha"] > per_owner["team-beta"] > per_owner["solo-gamma"] > 0, per_owner
    for t in tasks:
        assert t["title"] and t["description"] and t["project_key"]
        assert t["task_type"] in TASK_TYPES and t["status"] in TASK_STATUSES
        assert "{" not in t["title"] + t["description"], t["title"]
        if t["status"] == "failed":
            assert t["metadata"]["failure_class"] in FAILURE_CLASSES, t["key"]
    assert set(Counter(t["status"] for t in tasks)) == set(TASK_STATUSES)
    titles = Counter(t["title"] for t in tasks if "dup_group" not in t["metadata"])
    assert max(titles.values()) == 1, titles.most_common(3)
    _check_pairs(tasks, "tp", "description", 6)
    dups: dict[str, list[dict[str, Any]]] = {}
    for t in tasks:
        if "dup_group" in t["metadata"]:
            dups.setdefault(t["metadata"]["dup_group"], []).append(t)
    assert len(dups) >= 5, f"only {len(dups)} dup groups"
    for gid, members in dups.items():
        assert 2 <= len(members) <= 3 and len({m["owner"] for m in members}) == 1, gid

    # learnings
    assert len(learnings) >= 160, len(learnings)
    _check_keys(learnings, r"learning-\d{4}")
    _check_ages(learnings, "learnings")
    for x in learnings:
        assert x["task_type"] in TASK_TYPES and x["category"] in CATEGORIES, x["key"]
        assert x["failure_class"] in (*FAILURE_CLASSES, None), x["key"]
        assert x["trigger_event"] in (*TRIGGER_EVENTS, None), x["key"]
        assert 2 <= _sentences(x["content"]) <= 5, (x["key"], _sentences(x["content"]), x["content"])
        assert "{" not in x["title"] + x["content"], x["key"]
        fc = x["failure_class"]
        if fc:
            text = x["content"].lower()
            assert fc.lower() in text or fc.lower().replace("_", " ") in text, (x["key"], fc)
    fcs = Counter(x["failure_class"] for x in learnings)
    assert all(fcs[c] >= 8 for c in FAILURE_CLASSES), fcs
    types = Counter(x["task_type"] for x in learnings)
    assert all(types[t] >= 8 for t in TASK_TYPES), types
    assert set(Counter(x["category"] for x in learnings)) == set(CATEGORIES)
    assert {x["trigger_event"] for x in learnings} >= set(TRIGGER_EVENTS)
    pairs = _check_pairs(learnings, "p", "content", 12)
    assert any(m[0]["failure_class"] == "AUTH" for m in pairs.values()), "no auth pair"
    for pid, (a, b) in pairs.items():
        assert (a["failure_class"], a["category"], a["trigger_event"]) == \
               (b["failure_class"], b["category"], b["trigger_event"]), pid

    # capabilities and goals
    assert len(caps) >= 24, len(caps)
    _check_keys(caps, r"cap-\d{3}")
    _check_ages(caps, "capabilities")
    assert len(goals) >= 12, len(goals)
    _check_keys(goals, r"goal-\d{2}")
    _check_ages(goals, "goals", spread=False)
    assert {"team-alpha", "team-beta"} <= {g["owner"] for g in goals}
    for g in goals:
        assert g["status"] in GOAL_STATUSES and g["priority"] in (0, 1, 2, 3) and 0 <= g["progress"] <= 100
    assert set(Counter(g["status"] for g in goals)) == set(GOAL_STATUSES)
    assert sum(g["status"] in ("pending", "in_progress") for g in goals) >= 5

    # events
    assert len(events) >= 320, len(events)
    _check_keys(events, r"event-\d{4}")
    ages = [e["age_hours"] for e in events]
    assert all(0 <= a <= 720 for a in ages)
    assert sum(a < 24 for a in ages) >= 80 and sum(24 <= a < 72 for a in ages) >= 80
    assert all(e["type"] in EVENT_TYPES and e["payload"] for e in events)
    assert set(Counter(e["type"] for e in events)) == set(EVENT_TYPES)
    assert {e["type"] for e in events if e["age_hours"] < 24} == set(EVENT_TYPES)

    # memories
    assert len(memories) >= 60, len(memories)
    _check_keys(memories, r"mem-\d{3}")
    _check_ages(memories, "memories")
    assert all(m["content_type"] in CONTENT_TYPES and m["content"] and m["project_name"] for m in memories)
    assert set(Counter(m["content_type"] for m in memories)) == set(CONTENT_TYPES)
    for owner in ("team-alpha", "team-beta"):
        assert len({m["project_key"] for m in memories if m["owner"] == owner}) >= 3, owner
    assert sum(is_long(m["content"]) for m in memories) >= 8
    assert all("{" not in m["content"] for m in memories)

    # sessions: six weeks, every used item exists when its session runs, every style present
    sessions = corpus["sessions"]
    assert len(sessions) >= 250, len(sessions)
    _check_keys(sessions, r"session-\d{4}")
    assert all(0 < x["age_days"] <= SESSION_DAYS and x["query"] and x["output"] for x in sessions)
    ages = {x["key"]: x["age_days"] for x in (*tasks, *learnings, *memories)}
    assert all(ages[k] > x["age_days"] for x in sessions for k in x["uses"])
    assert set(Counter(x["style"] for x in sessions)) == {*SESSION_STYLES, "failure"}
    assert all(bool(x["uses"]) == (x["style"] != "unrelated") for x in sessions)
    assert sum(is_chinese(x["output"]) for x in sessions) >= len(sessions) // 3

    # bilingual balance over the free text
    texts = [t["description"] for t in tasks] + [x["content"] for x in learnings]
    texts += [m["content"] for m in memories]
    share = sum(map(is_chinese, texts)) / len(texts)
    assert 0.35 <= share <= 0.65, f"Chinese share {share:.2f}"


SUMMARY_TEXT = {
    "tasks": lambda x: x["description"], "learnings": lambda x: x["content"],
    "capabilities": lambda x: x["description"], "goals": lambda x: x["title"] + " " + x["description"],
    "events": lambda x: str(x["payload"].get("message") or x["payload"].get("title", "")),
    "memories": lambda x: x["content"],
    "sessions": lambda x: x["output"],
}


def summary(corpus: dict[str, Any]) -> str:
    """Counts per section and owner, and how many items are written in Chinese."""
    lines = []
    for section, text_of in SUMMARY_TEXT.items():
        items = corpus[section]
        by_owner = Counter(x["owner"] for x in items)
        zh = sum(is_chinese(text_of(x)) for x in items)
        lines.append(f"{section:13s} {len(items):4d}  " + "  ".join(f"{o}={by_owner[o]}" for o in OWNERS)
                     + f"  Chinese={zh}")
    return "\n".join(lines)


def main() -> None:
    corpus = build_corpus()
    check(corpus)
    OUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    OUT_PATH.write_text(json.dumps(corpus, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(summary(corpus))
    print(f"wrote {OUT_PATH} ({OUT_PATH.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
