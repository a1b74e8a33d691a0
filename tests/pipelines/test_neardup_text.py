"""Candidates by text (issue 21 item 3): labels whose reading gives the same brand are candidates of
check-and-insert at any pHash distance (the read-the-same set, written by the same Lua insert), and
the decision lets agreeing text (the brand and one more read field, none differing) make two
photographs one label on a looser image check; agreeing uploader fields with read text that does
not agree get a tighter one. Real Redis."""

from __future__ import annotations

import hashlib
import random
import uuid

import pytest
from PIL import Image

from pipelines.neardup import decision
from pipelines.neardup.index import TEXT_KEY, PHashIndex, _Synced


def _sha(x) -> str:
    return hashlib.sha1(str(x).encode()).hexdigest()


@pytest.fixture()
def keys():
    tag = uuid.uuid4().hex[:8]
    return {
        "log_key": f"test:phash:{tag}:log",
        "sha1_key": f"test:phash:{tag}:sha1",
        "sig_key": f"test:phash:{tag}:sig",
    }


class _Recorder:
    def __init__(self, same: set[str]):
        self.same, self.calls = same, []

    def __call__(self, candidates):
        self.calls.append(candidates)
        for label_id, distance, _entry in candidates:
            if label_id in self.same:
                return type("M", (), {"label_id": label_id, "distance": distance, "score": 0.5})()
        return None


def test_labels_that_read_the_same_are_candidates_at_any_distance(redis_client, keys):
    digest = uuid.uuid4().hex[:20]
    idx = PHashIndex(redis_client, 4, radius=12, **keys)
    a = idx.check_and_insert(
        "0000000000000000", _sha("a"), "x:0", entry="sig-a", verify=_Recorder(set()), text_digests=(digest,)
    )
    assert a.status == "indexed"
    assert redis_client.sismember(TEXT_KEY.format(digest=digest), _sha("a")[:16]), "joined by the insert"
    rec = _Recorder(set())
    other = idx.check_and_insert(
        "ffffffffffffffff", _sha("b"), "x:1", verify=rec, text_digests=(uuid.uuid4().hex[:20],)
    )
    assert other.status == "indexed" and not any(rec.calls), "another reading, distance 64: no candidate"
    rec = _Recorder({a.label_id})
    same = idx.check_and_insert("fffffffffffffff0", _sha("c"), "x:2", verify=rec, text_digests=(digest,))
    assert (same.status, same.label_id, same.distance) == ("dedup", a.label_id, 60)
    assert (a.label_id, 60, "sig-a") in rec.calls[0], "by text, at distance 60"
    assert (
        idx.identify("fffffffffffffff0", _sha("d"), _Recorder({a.label_id}), text_digests=(digest,)).label_id
        == a.label_id
    )
    assert idx.identify("fffffffffffffff0", _sha("d"), _Recorder({a.label_id})) is None, "without the text: too far"


def test_the_script_finds_a_text_candidate_the_callers_copy_has_not_seen(redis_client, keys):
    """Atomic across workers: b is behind the log; the Lua step finds a (far by hash, the same by
    text) in the tail and hands it to b's verifier instead of inserting."""
    digest = uuid.uuid4().hex[:20]
    a = PHashIndex(redis_client, 4, radius=12, **keys)
    b = PHashIndex(redis_client, 4, radius=12, **keys)
    b.sync()
    first = a.check_and_insert(
        "00000000000000ff", _sha("a"), "x:0", entry="sig-a", verify=_Recorder(set()), text_digests=(digest,)
    )
    b._sync = lambda *_args, **_kw: _Synced()  # b reads nothing more of the log
    rec = _Recorder({first.label_id})
    out = b.check_and_insert("ffffffffffffff00", _sha("b"), "x:1", entry="sig-b", verify=rec, text_digests=(digest,))
    assert (out.status, out.label_id, out.distance) == ("dedup", first.label_id, 64)


def test_text_agrees_needs_the_brand_and_one_more_field_and_nothing_differing():
    read = {"brand_name": "八海山", "grade": "純米吟醸", "seimai": "50%"}
    assert decision.text_agrees(read, dict(read))
    assert decision.text_agrees(read, {"brand_name": " 八海山", "grade": "純米吟醸", "seimai": "50 %"}), "normalised"
    assert decision.text_agrees({"brand_name": "八海山", "seimai": "50%"}, {"brand_name": "八海山", "seimai": "50%"})
    assert not decision.text_agrees(read, {"brand_name": "八海山", "seimai": "50%"}), "grade read off one side only"
    assert not decision.text_agrees(read, {"brand_name": "八海山"}), "the brand alone is not enough"
    assert not decision.text_agrees(read, {"grade": "純米吟醸", "seimai": "50%"}), "no brand read"
    assert not decision.text_agrees(read, {**read, "seimai": "60%"}), "a field differs"
    assert decision.text_digests(read) == decision.text_digests({"brand_name": " 八海山 "}) != ()
    assert decision.text_digests({"grade": "純米"}) == ()


def _photos(seed: int):
    from tools.photolabels import make_spec, photograph, render

    rng = random.Random(seed)
    img = render(make_spec(rng, split="tune", side="front", kind="sake")).image
    a, _ = photograph(img, random.Random(rng.getrandbits(64)), crop=0)
    b, _ = photograph(img, random.Random(rng.getrandbits(64)), crop=1.0)
    return a, b


def _judge(query: Image.Image, stored: Image.Image, read_q=None, read_s=None, fields=None):
    entry, _digest, _v = decision.verifier_for(stored, fields, 10, read=read_s)
    _e, _d, verify = decision.verifier_for(query, fields, 10, read=read_q)
    return verify([("label_x", 30, entry)]), verify.judged[0]


def test_agreeing_text_lets_two_photographs_of_one_label_be_one():
    read = {"brand_name": "八海山", "grade": "純米吟醸", "alcohol": "15度"}
    for seed in range(40):  # a pair the pixel-only check keeps apart and agreeing text joins
        a, b = _photos(seed)
        _m, pixels = _judge(b, a)
        match, text = _judge(b, a, read, dict(read))
        if pixels["same"] is False and text["same"]:
            assert text["reason"] == "verifier (text agrees)" and match is not None
            assert text["score"] <= decision.TEXT_AGREE_MAX_SCORE
            # the brand alone read alike: no looser check
            _m, brand_only = _judge(b, a, {"brand_name": "八海山"}, {"brand_name": "八海山"})
            assert brand_only["reason"] == "verifier" and brand_only["same"] is False
            return
    pytest.fail("no pair in 40 where agreeing text changed the verdict")


def test_agreeing_fields_with_read_text_that_does_not_agree_get_the_tighter_limit():
    fields = {"category": "sake", "brand_name": "八海山", "product_name": "限定"}
    a, b = _photos(3)
    _m, unread = _judge(b, a, fields=fields)
    _m, differs = _judge(
        b, a, {"brand_name": "八海山", "grade": "純米"}, {"brand_name": "八海山", "alcohol": "15度"}, fields
    )
    assert unread["reason"] == differs["reason"] == "verifier (fields agree)"
    assert unread["score"] == differs["score"]
    assert unread["same"] == (unread["score"] <= decision.FIELDS_AGREE_MAX_SCORE)
    assert differs["same"] == (differs["score"] <= decision.FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE)


def _judge_said(query, stored, q: tuple[dict, dict], s: tuple[dict, dict]):
    entry, _digest, _v = decision.verifier_for(stored, None, 10, read=s[0], said=s[1])
    _e, _d, verify = decision.verifier_for(query, None, 10, read=q[0], said=q[1])
    return verify([("label_x", 30, entry)]), verify.judged[0]


def test_values_read_unsurely_agree_but_only_sure_ones_veto():
    """Agreement is judged on every value read (the same value off two photographs is evidence
    however surely each was read); a brand vetoes only when read surely on both sides, the grade
    and the printed numbers however surely (decision.SAID_VETO_KEYS)."""
    sure = {"brand_name": "八海山", "grade": "純米吟醸"}
    said = {**sure, "volume": "720ml"}  # 720ml read on both, under the identity confidence on one
    for seed in range(40):
        a, b = _photos(seed)
        _m, text = _judge_said(b, a, (sure, said), ({**sure, "volume": "720ml"}, said))
        if text["reason"] == "verifier (text agrees)" and text["same"]:
            break
    else:
        pytest.fail("no pair in 40 where agreeing text joined the photographs")
    # the unsure part alone makes them agree: without it one side has a field the other lacks
    _m, one_sided = _judge_said(b, a, (sure, said), (sure, sure))
    assert one_sided["reason"] == "verifier"
    # a brand read unsurely and differing does not split the pair (it stops the agreement only)...
    _m, unsure_brand = _judge_said(b, a, (sure, said), (sure, {**said, "brand_name": "八海仙"}))
    assert not unsure_brand["reason"].startswith("read")
    # ...a printed number read unsurely and differing does...
    _m, unsure_differs = _judge_said(b, a, (sure, said), (sure, {**sure, "volume": "1800ml"}))
    assert unsure_differs == {**unsure_differs, "same": False, "reason": "read volume differs"}
    # ...and a surely read one does
    _m, vetoed = _judge_said(b, a, (said, said), ({**sure, "volume": "1800ml"}, {**sure, "volume": "1800ml"}))
    assert vetoed == {**vetoed, "same": False, "reason": "read volume differs"}
    # entries written before "said" existed compare on their sure part
    _sig, theirs = decision.parse_entry(decision.make_entry(b"\0" * 3072, None, sure))
    assert decision.stored_said(theirs) == {k: decision._read_norm(v) for k, v in sure.items()}


def test_numbers_that_may_be_read_as_one_another_neither_agree_nor_veto():
    """56% read where the recogniser also saw a 5, against 55%: no conflict (a misread must not
    part two photographs of one label), but no agreement either (two labels of a product line may
    differ in exactly that digit): the text is only consistent, and the field's printed line must
    be compared alike before a merge (decision.maybe_differs)."""
    a = {"brand_name": "白乃雫", "seimai": "56%|55%", "alcohol": "18度"}
    b = {"brand_name": "白乃雫", "seimai": "55%", "alcohol": "18度"}
    assert decision.read_conflict(a, b, decision.SAID_VETO_KEYS) is None
    assert not decision.text_agrees(a, b) and decision.text_consistent(a, b)
    assert decision.maybe_differs(a, b) == {"seimai"}
    other = {"brand_name": "白乃雫", "seimai": "60%", "alcohol": "18度"}
    assert decision.read_conflict(a, other, decision.SAID_VETO_KEYS) == "seimai"
    assert not decision.text_consistent(a, other) and not decision.maybe_differs(a, other)
    assert decision.text_agrees(a, {**b, "seimai": "56%"}), "the value itself is the first"
    assert decision.read_value("56%|55%") == "56%"


def test_a_number_read_with_a_digit_lost_neither_agrees_nor_vetoes():
    """16度 read 6度, 65% read 6%, 1800ml read 180ml: small print drops a digit, so the number is
    only consistent with the other photograph's (its printed line must then be compared alike, and
    the longer value is read across: test_neardup_printed), never a veto. Another digit, another
    unit, or a grade that is part of another is still one."""
    for key, a, b in [("alcohol", "6度", "16度"), ("seimai", "6%", "65%"), ("volume", "180ml", "1800ml")]:
        x, y = {"brand_name": "夢の灯", key: a}, {"brand_name": "夢の灯", key: b}
        assert decision.read_conflict(x, y, decision.SAID_VETO_KEYS) is None, (a, b)
        assert decision.text_consistent(x, y) and not decision.text_agrees(x, y), (a, b)
        assert decision.maybe_differs(x, y) == {key}, (a, b)
        assert decision._longer_side(a, b) == "c" and decision._longer_side(b, a) == "q"
    for key, a, b in [("alcohol", "15度", "16度"), ("seimai", "60%", "65%"), ("volume", "180ml", "1800度")]:
        x, y = {"brand_name": "夢の灯", key: a}, {"brand_name": "夢の灯", key: b}
        assert decision.read_conflict(x, y, decision.SAID_VETO_KEYS) == key, (a, b)
    assert decision.read_conflict({"grade": "純米"}, {"grade": "特別純米"}, decision.SAID_VETO_KEYS) == "grade"


def test_brands_read_alike_meet_by_text_and_neither_agree_nor_veto():
    """Brush lettering read twice: a cursive の read as 八 or left out, a stroke read as another
    kanji. Brands that begin and end alike with at most two characters between them differing
    share a read-the-same set (candidates at any distance) and are only consistent, like numbers
    that may be one another: the brand's printed line must be compared alike before a merge."""
    alike = [("天の雫", "天刀雫"), ("花の里", "花里"), ("朝里", "朝和口里"), ("春のしぼり", "春のしぽり")]
    # one end misread, lost or cut: the other end's two characters are kept
    alike += [("白の雫", "白の率"), ("山のしぼり", "しぼり"), ("山のしぼり", "山のし"), ("十四代", "千四代")]
    alike += [("十四代", "四代"), ("八海山", "八海")]  # a name of three read as two
    for a, b in alike:
        assert decision.brands_alike(a, b) and decision.brands_alike(b, a), (a, b)
        shared = set(decision.text_digests({"brand_name": a})) & set(decision.text_digests({"brand_name": b}))
        assert shared, (a, b)
        x, y = {"brand_name": a, "seimai": "55%"}, {"brand_name": b, "seimai": "55%"}
        assert decision.read_conflict(x, y) is None and decision.text_consistent(x, y), (a, b)
        assert not decision.text_agrees(x, y) and decision.maybe_differs(x, y) == {"brand_name"}
    # read surely on both sides, an end read otherwise is another name (a product line's brands)
    assert decision.read_conflict({"brand_name": "星の光"}, {"brand_name": "風の光"}, sure=True) == "brand_name"
    assert decision.read_conflict({"brand_name": "星の光"}, {"brand_name": "風の光"}) is None
    assert decision.read_conflict({"brand_name": "天の雫"}, {"brand_name": "天刀雫"}, sure=True) is None
    for a, b in [("白鶴", "白鷹"), ("梵", "作"), ("獺祭", "田酒"), ("八海山", "八海山山山山"), ("白の雫", "月の華")]:
        assert not decision.brands_alike(a, b), (a, b)
        assert decision.read_conflict({"brand_name": a}, {"brand_name": b}) == "brand_name", (a, b)
    assert not set(decision.text_digests({"brand_name": "白鶴"})) & set(decision.text_digests({"brand_name": "白鷹"}))


def test_a_brand_read_in_an_old_kanji_form_meets_its_common_form():
    """A recogniser reading brush lettering gives 惠 for 恵 (and the particle as 門): the two reads
    share a read-the-same set and are read alike once old forms are folded to the common one."""
    for a, b in [("白の恵み", "門惠み"), ("天の恵み", "夫の惠み"), ("黒龍", "黒竜")]:
        assert decision.brands_alike(a, b) and decision.brands_alike(b, a), (a, b)
        assert set(decision.text_digests({"brand_name": a})) & set(decision.text_digests({"brand_name": b})), (a, b)
    # the keys of the brand as read are kept beside the folded ones (sets joined before the fold)
    assert set(decision.text_digests({"brand_name": "櫻"})) >= set(decision.text_digests({"brand_name": "桜"}))
    assert set(decision.text_digests({"brand_name": "櫻"})) > set(decision.text_digests({"brand_name": "桜"}))
    assert decision.read_conflict({"brand_name": "天の惠み"}, {"brand_name": "天の恵み"}, sure=True) is None
    assert not decision.brands_alike("白の恵み", "月の華")


def test_brands_that_may_be_one_another_meet_and_merge_only_confirmed():
    """A brand read with the names a doubted character may make (鍋鳥|鍋島, from
    pipelines.read.fields._brand_maybes) meets the brand it may be in a read-the-same set, neither
    agrees nor vetoes (even read surely on both sides), and merges only with the brand's printed
    line compared alike; brands that share no name still differ."""
    # a name of two with one character misread shares no key of its own (鳥 for 島)
    misread, right = "鍋鳥|鍋島|鍋烏", "鍋島"
    assert not decision.brands_alike("鍋鳥", "鍋島")
    assert not set(decision.text_digests({"brand_name": "鍋鳥"})) & set(decision.text_digests({"brand_name": right}))
    assert set(decision.text_digests({"brand_name": misread})) & set(decision.text_digests({"brand_name": right}))
    x, y = {"brand_name": misread, "seimai": "55%"}, {"brand_name": right, "seimai": "55%"}
    assert decision.read_conflict(x, y, sure=True) is None and decision.text_consistent(x, y)
    assert not decision.text_agrees(x, y) and decision.maybe_differs(x, y) == {"brand_name"}
    assert decision.read_conflict({"brand_name": "鍋鳥|鍋烏"}, {"brand_name": right}, sure=True) == "brand_name"
    a, _b = _photos(1)
    smaller = a.resize((a.width * 3 // 4, a.height * 3 // 4))
    base = {"alcohol": "18度", "seimai": "55%"}
    found, row = _judge_said(smaller, a, ({}, {**base, "brand_name": misread}), ({}, {**base, "brand_name": right}))
    assert found is None and row["reason"].endswith("printed lines not compared"), row


def test_a_brand_read_alike_never_merges_unconfirmed():
    """The same photograph resized (the pixels join it) with its brand read alike, not the same: no
    printed-lines check here, so no merge; read the same, it merges as before."""
    a, _b = _photos(1)
    smaller = a.resize((a.width * 3 // 4, a.height * 3 // 4))
    base = {"seimai": "55%", "alcohol": "18度"}
    same, _row = _judge_said(smaller, a, ({}, {**base, "brand_name": "白乃雫"}), ({}, {**base, "brand_name": "白乃雫"}))
    assert same is not None
    alike, row = _judge_said(smaller, a, ({}, {**base, "brand_name": "白八雫"}), ({}, {**base, "brand_name": "白乃雫"}))
    assert alike is None and row["reason"].endswith("printed lines not compared"), row


def test_a_number_that_may_be_another_never_merges_unconfirmed():
    """The same photograph resized (the pixels join it) with a number read as values that may be
    one another: without its printed line compared (no printed-lines check here) it is not merged,
    where two equal numbers merge as before."""
    a, _b = _photos(1)
    smaller = a.resize((a.width * 3 // 4, a.height * 3 // 4))
    base = {"brand_name": "白乃雫", "alcohol": "18度"}
    same, _row = _judge_said(smaller, a, ({}, {**base, "seimai": "55%"}), ({}, {**base, "seimai": "55%"}))
    assert same is not None
    maybe, row = _judge_said(smaller, a, ({}, {**base, "seimai": "56%|55%"}), ({}, {**base, "seimai": "55%"}))
    assert maybe is None and row["reason"].endswith("printed lines not compared"), row
