"""Long queries (issue 12, item 4): a dialogue or a long prompt is focused on its last turns (text.focus), and
search embeds the focused text and weighs keyword terms by recency; short queries are left exactly as they are."""

from __future__ import annotations

import pytest

from memory_pipelines.context.builder import build_memory_context
from memory_pipelines.index.keywords import index_all
from memory_pipelines.index.vectors import embed_all
from memory_pipelines.retrieval.query import DICTIONARY_WEIGHT, EXPANSION_WEIGHT, query_terms
from memory_pipelines.retrieval.search import SearchFilters, search
from memory_pipelines.text.dictionary import expand_terms
from memory_pipelines.text.focus import DECAY, EMBED_BUDGET, FLOOR, focus, names_a_thing, split_turns
from memory_pipelines.text.glossary import expand
from memory_pipelines.text.keywords import keyword_terms, terms
from memory_pipelines.text.times import without_relative_past
from memory_pipelines.text.tokens import count_tokens
from tests.factories import add_memory

SHORT = [
    "When did Caroline go to the LGBTQ support group?",
    "deploy payment service",
    "  leading and trailing spaces  ",
    "支付服务的部署计划是什么？",
    "嗨，AI伴侣，今天我学了一道新的菜，叫做清蒸鲈鱼，非常好吃！",
    "Stripe 返回 401 认证失败怎么办",
    "hi\nthanks",
    "x",
]

DIALOGUE = [
    "User: Hi! I'm planning a trip to Japan next spring and I want to see the cherry blossoms in Kyoto.",
    "AI: Hello! Late March to early April is usually the best time for cherry blossoms in Kyoto.",
    "User: Great, which temples in Kyoto are the most beautiful during the blossom season?",
    "AI: Kiyomizu-dera, the Philosopher's Path and Maruyama Park are popular blossom spots in Kyoto.",
    "User: Should I buy a rail pass for the trip between Tokyo and Kyoto?",
    "AI: A Japan rail pass pays off if you travel between several cities on the shinkansen.",
    "User: ok thanks lol",
    "AI: You're welcome! Anything else about the Japan trip?",
    "User: Yeah, how much yen should I bring for street food in Osaka?",
    "AI: Street food in Osaka is cheap; a few thousand yen a day is plenty.",
    "User: haha ok cool",
    "User: By the way, which dentist did I book for my teeth cleaning appointment?",
]


def _old_query_terms(query: str) -> dict[str, float]:
    """query_terms before focusing (issue 12, items 1-3)."""
    own = list(dict.fromkeys(keyword_terms(query)))
    weights = dict.fromkeys(own, 1.0)
    for term in expand(own):
        weights.setdefault(term, EXPANSION_WEIGHT)
    for term, weight in expand_terms(own, DICTIONARY_WEIGHT).items():
        weights.setdefault(term, weight)
    return weights


@pytest.mark.parametrize("query", SHORT)
def test_short_queries_are_left_exactly_as_they_are(query):
    f = focus(query)
    assert split_turns(query) == [query]
    assert f.embed_text is query or f.embed_text == query
    assert f.long is False
    # its terms are the keyword terms of its words, less the times relative to when it was asked (below)
    assert f.term_weights == dict.fromkeys(keyword_terms(without_relative_past(query)), 1.0)
    assert list(query_terms(query).items()) == list(_old_query_terms(without_relative_past(query)).items())


def test_a_short_querys_role_labels_are_not_its_keyword_terms():
    """"User:" starting a line says who speaks, as a long dialogue's turns are read: it would match every memory
    written with that speaker (indexed "User: …") and the memories that say "user". The text embedded is the
    query as it is; a role word inside a line stays a term."""
    query = "User: hi\nAI: hello\nUser: where is my passport?\n用户：护照在哪里"
    f = focus(query)
    assert split_turns(query) == [query] and f.embed_text == query and f.long is False
    assert list(f.term_weights) == ["hi", "hello", "passport", "护照"]
    assert focus("What did the user tell the AI: its name?").term_weights == dict.fromkeys(
        ["user", "tell", "ai", "name"], 1.0)


def test_a_short_querys_relative_times_are_not_its_keyword_terms():
    """"yesterday" or 上个月 in a memory means another time than in the question (the date prior reads the question's);
    a month's name means the same in both and stays. The text embedded is the question as it is."""
    assert list(focus("我上个月去哪儿旅游了？").term_weights) == ["旅游"]
    assert list(focus("What did I cook last weekend?").term_weights) == ["cook"]
    assert list(focus("When did Melanie go camping in June?").term_weights) == ["melani", "go", "camp", "june"]
    assert focus("What did I cook last weekend?").embed_text == "What did I cook last weekend?"


def test_a_long_dialogue_is_embedded_by_its_last_turns_within_the_budget():
    query = "\n".join(DIALOGUE * 2)  # 24 turns
    assert len(split_turns(query)) == 24
    f = focus(query)
    assert f.long
    assert f.embed_text.endswith(DIALOGUE[-1])
    assert count_tokens(f.embed_text) <= EMBED_BUDGET
    assert "cherry blossoms" not in f.embed_text  # the first turns are gone
    assert "haha ok cool" not in f.embed_text  # a filler turn is skipped


def test_the_last_turn_weighs_most_and_filler_is_dropped():
    f = focus("\n".join(DIALOGUE))
    w = f.term_weights
    for word in ("dentist", "teeth", "cleaning", "appointment"):
        assert w[terms(word)[0]] == 1.0
    assert w["osaka"] == DECAY  # the content turn before it ("haha ok cool" is no turn)
    assert w["bring"] == pytest.approx(DECAY**2)
    assert w["japan"] == pytest.approx(DECAY**3)  # a term takes its highest weight (turn 8 over turn 1)
    assert w[terms("temple")[0]] == w[terms("cherry")[0]] == FLOOR
    assert w["great"] < 1.0  # soft filler stays a term in a turn with content
    for filler in ("hi", "hello", "thank", "lol", "yeah", "haha", "cool", "ok", "user", "ai"):
        assert filler not in w


def test_a_filler_last_turn_leaves_the_turn_before_it_in_front():
    query = (
        "User: I need to renew my passport before the trip, where is the passport office near me?\n"
        "AI: The passport office on Main Street is open on weekdays from nine to five o'clock.\n"
        "User: thanks lol"
    )
    f = focus(query)
    assert f.long
    assert f.term_weights["street"] == 1.0 and "thank" not in f.term_weights
    assert f.embed_text.endswith("nine to five o'clock.")


def test_a_chinese_dialogue_splits_into_its_turns():
    query = (
        "用户：你好！我下个月想去日本旅游，京都的樱花什么时候开？\n"
        "助手：京都的樱花一般在三月底到四月初开放，清水寺和哲学之道都很漂亮。\n"
        "用户：谢谢，哈哈。另外，我上次预约的牙医叫什么名字？"
    )
    turns = split_turns(query)
    assert len(turns) == 3
    assert turns[0].startswith("用户：") and turns[1].startswith("助手：") and turns[2].startswith("用户：")
    f = focus(query)
    assert f.long and f.embed_text.endswith("牙医叫什么名字？")
    w = f.term_weights
    assert w["牙医"] == 1.0 and w["日本"] < w["清水"] < 1.0
    for filler in ("你好", "谢谢", "哈哈", "用户", "助手"):
        assert filler not in w


def test_a_dialogue_written_on_one_line_and_blank_line_blocks_split():
    inline = (
        "User: what was the name of the espresso machine I bought? AI: It was a Gaggia Classic, you bought "
        "it in May. User: and what grinder did I pair it with for the espresso?"
    )
    assert [t.split(":")[0] for t in split_turns(inline)] == ["User", "AI", "User"]
    blocks = (
        "Here is the error log from last night's deploy of the billing service to production.\n\n"
        "Traceback: connection refused on port 5432 while running the migration step.\n\n"
        "What did we do last time postgres refused connections during a deploy?"
    )
    assert len(split_turns(blocks)) == 3
    w = focus(blocks).term_weights
    refused, traceback, billing = terms("refused traceback billing")
    assert (w[refused], w[traceback], w[billing]) == (1.0, DECAY, pytest.approx(DECAY**2))


def test_a_long_single_paragraph_falls_back_to_sentences_and_is_cut():
    sentences = [f"Sentence number {i} talks about topic{i} and a few other words." for i in range(60)]
    sentences.append("Finally, what is the status of the billing migration?")
    paragraph = " ".join(sentences)
    assert len(paragraph) > 3000
    assert len(split_turns(paragraph)) == 61
    f = focus(paragraph)
    assert f.long
    assert count_tokens(f.embed_text) <= EMBED_BUDGET
    assert f.embed_text.endswith("status of the billing migration?") and "topic0 " not in f.embed_text
    assert f.term_weights[terms("migration")[0]] == 1.0 and f.term_weights["topic0"] == FLOOR
    chinese = "我们讨论了很多关于项目进度的事情，" * 120 + "最后请问数据库迁移的状态如何？"
    f = focus(chinese)
    assert f.long and count_tokens(f.embed_text) <= EMBED_BUDGET and f.embed_text.endswith("状态如何？")


def test_one_turn_longer_than_the_budget_is_cut():
    run_on = "and then " + " ".join(f"word{i}" for i in range(400))  # one sentence of ~800 tokens
    f = focus(run_on)
    assert f.long and 0 < count_tokens(f.embed_text) <= EMBED_BUDGET
    assert f.embed_text.startswith("and then word0")


def test_focus_is_cached_but_returns_a_fresh_dict():
    query = "\n".join(DIALOGUE)
    focus(query).term_weights["dentist"] = 0.0
    assert focus(query).term_weights["dentist"] == 1.0


def test_expansions_of_a_focused_query_weigh_by_their_source_term():
    query = "\n".join(DIALOGUE[:-1] + ["User: 我的牙医是谁？"])
    weights = query_terms(query)
    assert weights["牙医"] == 1.0 and weights["dentist"] == DICTIONARY_WEIGHT  # from the last turn
    cherry = expand_terms(terms("cherry"), DICTIONARY_WEIGHT)["樱桃"]  # CC-CEDICT's "cherry", from turn 1
    assert weights["樱桃"] == pytest.approx(cherry * FLOOR)
    translated = {t: w for t, w in weights.items() if t not in focus(query).term_weights}
    assert max(translated.values()) == weights["dentist"]


@pytest.fixture
def topics(pool, fake_embedder):
    with pool.connection() as conn:
        ids = {
            "dentist": add_memory(conn, "alice", "Booked a teeth cleaning appointment with dentist Dr. Lee."),
            "japan": add_memory(
                conn, "alice", "Japan trip plan: cherry blossoms in Kyoto temples, rail pass, street food in Osaka."
            ),
        }
        for i in range(12):
            add_memory(conn, "alice", f"unrelated note {i} about groceries and laundry")
    embed_all(pool, fake_embedder)
    index_all(pool)
    return ids


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "semantic"])
def test_a_dialogue_finds_what_its_last_turn_asks_about(pool, fake_embedder, topics, mode):
    query = "\n".join(DIALOGUE)
    hits = search(pool, fake_embedder, "alice", query, mode=mode, filters=SearchFilters(sources=("memory",))).hits
    ids = [h.id for h in hits]
    assert ids[0] == topics["dentist"]
    assert topics["japan"] not in ids or ids.index(topics["japan"]) > 0


def test_a_short_last_turn_is_embedded_with_the_turn_before_it():
    query = (
        "User: I compared two espresso machines last week, the Gaggia Classic and the Breville Bambino Plus.\n"
        "AI: The Gaggia Classic costs about 450 euros; the Breville Bambino Plus about 400 euros.\n"
        "User: and the grinder?"
    )
    f = focus(query)
    assert f.embed_text == "\n".join(query.split("\n")[1:])  # "grinder" alone says too little
    assert f.term_weights["grinder"] == 1.0 and f.term_weights[terms("breville")[0]] == DECAY


def test_a_context_build_for_a_dialogue_leads_with_its_last_turns_topic(pool, fake_embedder, topics):
    ctx = build_memory_context(pool, fake_embedder, "alice", "\n".join(DIALOGUE), mode="chat", log_build=False)
    ids = [it.id for it in ctx.items]
    assert ids[0] == topics["dentist"]


def test_a_short_dialogues_speaker_labels_match_no_memory_by_its_speaker(pool, fake_embedder):
    """A short dialogue's "User:" lines used to be the keyword term "user", which every memory written with speaker
    User holds in its indexed text ("User: I love travelling"): such memories were keyword hits of any dialogue."""
    with pool.connection() as conn:
        said = add_memory(conn, "alice", "I love travelling", speaker="User")
        job = add_memory(conn, "alice", "I am looking for a job these days", speaker="Bot")
    embed_all(pool, fake_embedder)
    index_all(pool)
    query = "User: hi, are you there?\nBot: Always here for you\nUser: the job search is getting me down"
    hits = search(pool, fake_embedder, "alice", query, mode="keyword").hits
    assert [h.id for h in hits] == [job] and said not in [h.id for h in hits]


MAGIC_SHOW = [
    "User: 元旦晚会我要表演魔术，我已经练习了好几个星期了。",
    "Assistant: 听起来很棒！你准备表演什么魔术呢？",
    "User: 我准备表演扑克牌魔术，还有一个消失的硬币。",
    "Assistant: 太厉害了，大家一定会很惊喜的。",
    "User: 我特别期待那天晚上，我想让它变得很特别！",
]


def test_a_chinese_last_turn_that_names_no_thing_is_embedded_with_the_turns_before_it():
    """The issue's example: the last turn has enough words to stand alone, but none names what it is about
    (那天 and 它 point back); the turns before it that fit the budget say it (魔术). A last turn that names a thing
    stays alone. The same in English, where the words that name nothing are listed (`GENERIC_WORDS`)."""
    text = focus("\n".join(MAGIC_SHOW)).embed_text
    assert text.endswith(MAGIC_SHOW[-1]) and "魔术" in text and count_tokens(text) <= EMBED_BUDGET
    named = [*MAGIC_SHOW[:-1], "User: 我打算在晚会上表演扑克牌魔术，还准备了一套新衣服！"]
    assert focus("\n".join(named)).embed_text == named[-1]
    english = [*DIALOGUE[:-1], "User: I'm really looking forward to that night, I want to make it very special!"]
    text = focus("\n".join(english)).embed_text
    assert text.endswith(english[-1]) and text != english[-1] and count_tokens(text) <= EMBED_BUDGET
    named = [*DIALOGUE[:-1], "User: I'm really looking forward to the concert, I want to make it very special!"]
    assert focus("\n".join(named)).embed_text == named[-1]


@pytest.mark.parametrize(("turn", "named"), [
    ("User: 我特别期待那天晚上，我想让它变得很特别！", False),
    ("User: 我喜欢吃火锅", True),  # a set phrase (吃火锅, tagged l) holding a noun (火锅)
    ("User: 他现在好多了，还能跟我一起打游戏", True),
    ("User: 那怎么办呢？", False),  # a set phrase of no noun
    ("User: 好的，谢谢你", False),  # 谢谢 is tagged a name
    ("User: 我会努力的", False),  # 我会 is tagged a noun
    ("User: 我家的猫生病了", True),
    ("User: I am looking forward to it", False),
    ("User: That sounds great, I can't wait!", False),
    ("User: Thanks, I'll definitely try that tomorrow", False),
    ("User: Yes, I loved it so much, it was the best time ever", False),
    ("User: I'm going to Paris next week", True),
    ("User: My dog got sick yesterday", True),
])
def test_names_a_thing_reads_what_a_turn_names(turn, named):
    assert names_a_thing(turn) is named


MAGIC_SHOW_EN = [
    "User: I'm doing a magic show at the New Year's party, I've been practising for weeks.",
    "Assistant: That sounds great! Which tricks are you going to do?",
    "User: A card trick with a borrowed deck, and a vanishing coin.",
    "Assistant: Your friends will love it.",
    "User: I'm really looking forward to that night, I want to make it very special!",
]


@pytest.mark.parametrize(("dialogue", "topic", "others"), [
    (MAGIC_SHOW, "扑克牌魔术和消失的硬币是我最拿手的表演", ["晚上我喜欢安静地看书，感觉很特别", "周末去爬山"]),
    (MAGIC_SHOW_EN, "My best tricks are a card trick and a vanishing coin",
     ["I love quiet nights in, they feel very special", "Hiking on weekends"]),
])
def test_a_dialogue_whose_last_turn_names_no_thing_finds_its_topic(pool, fake_embedder, dialogue, topic, others):
    with pool.connection() as conn:
        wanted = add_memory(conn, "li", topic)
        for text in others:
            add_memory(conn, "li", text)
    embed_all(pool, fake_embedder)
    index_all(pool)
    hits = search(pool, fake_embedder, "li", "\n".join(dialogue), mode="semantic").hits
    assert hits[0].id == wanted
