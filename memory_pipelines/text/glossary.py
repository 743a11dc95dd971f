"""A bilingual (Chinese ↔ English) glossary of engineering terms for cross-lingual keyword search.

The bundled 4-bit multilingual-e5-small matches Chinese queries to English text only weakly: for
"认证失败" it scores an "Auth error: expired token" learning 0.816 and an unrelated "Flaky UI test"
0.819 (measured; see tests/test_context.py). Expanding query terms through this glossary lets the
keyword channel of hybrid search bridge the two languages for the vocabulary agents actually use.
Terms are in the normalised form `text.keywords.terms` produces.
"""

from __future__ import annotations

import functools

from .keywords import terms

# Chinese term -> English words (each side is run through `terms`, so plurals and case normalise).
PAIRS: dict[str, str] = {
    "认证": "auth authentication",
    "鉴权": "auth authorization",
    "授权": "authorization oauth",
    "失败": "fail failure error",
    "错误": "error",
    "异常": "exception error",
    "报错": "error",
    "令牌": "token",
    "过期": "expired expiry",
    "登录": "login",
    "密码": "password",
    "权限": "permission",
    "限流": "rate limit throttling",
    "速率": "rate",
    "限制": "limit",
    "配额": "quota",
    "超时": "timeout",
    "重试": "retry",
    "退避": "backoff",
    "网络": "network",
    "连接": "connection",
    "数据库": "database postgres",
    "连接池": "connection pool",
    "耗尽": "exhausted",
    "内存": "memory",
    "泄漏": "leak",
    "磁盘": "disk",
    "磁盘空间": "disk space",
    "资源": "resource",
    "账单": "billing",
    "上限": "cap limit",
    "费用": "cost billing",
    "部署": "deploy deployment",
    "回滚": "rollback",
    "发布": "release",
    "上线": "release launch",
    "测试": "test testing",
    "单元测试": "unit test",
    "稳定": "flaky stable",
    "回归": "regression",
    "代码": "code",
    "审查": "review",
    "评审": "review",
    "合并": "merge",
    "数据": "data",
    "迁移": "migration",
    "备份": "backup",
    "索引": "index",
    "向量": "vector embedding",
    "检索": "retrieval search",
    "搜索": "search",
    "嵌入": "embedding",
    "缓存": "cache",
    "失效": "invalidation",
    "队列": "queue",
    "积压": "backlog",
    "死锁": "deadlock",
    "证书": "certificate",
    "跨域": "cors",
    "熔断": "circuit breaker",
    "降级": "degrade fallback",
    "告警": "alert",
    "监控": "monitoring",
    "日志": "log logs",
    "延迟": "latency",
    "性能": "performance",
    "优化": "optimization",
    "依赖": "dependency",
    "冲突": "conflict",
    "配置": "config configuration",
    "升级": "upgrade",
    "任务": "task",
    "计划": "plan",
    "目标": "goal okr",
    "需求": "requirement",
    "用户": "user",
    "客户": "customer",
    "接口": "api interface",
    "服务": "service",
    "服务器": "server",
    "容器": "container docker",
    "集群": "cluster kubernetes",
    "流水线": "pipeline",
    "构建": "build",
    "故障": "incident outage failure",
    "根因": "root cause rca",
    "修复": "fix",
    "问题": "issue problem",
    "内存溢出": "oom out of memory",
    "并发": "concurrency",
    "事务": "transaction",
    "锁": "lock",
    "支付": "payment",
    "订单": "order",
    "通知": "notification",
    "邮件": "email",
    "文档": "documentation",
}


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for zh, en in PAIRS.items():
        zh_terms, en_terms = set(terms(zh)) or {zh}, set(terms(en))
        for z in zh_terms:
            table.setdefault(z, set()).update(en_terms)
        for e in en_terms:
            table.setdefault(e, set()).update(zh_terms)
    return {k: frozenset(v) for k, v in table.items()}


def expand(query_terms: list[str]) -> list[str]:
    """The query terms plus their translations from the glossary (deduplicated, order kept)."""
    index = _index()
    out = list(dict.fromkeys(query_terms))
    seen = set(out)
    for term in query_terms:
        for other in sorted(index.get(term, ())):
            if other not in seen:
                seen.add(other)
                out.append(other)
    return out
