"""The stdlib client and the LangChain / LlamaIndex adapters against the real API."""

from __future__ import annotations

import subprocess
import sys

import pytest

from clients.retrieve import RetrieveClient, RetrieveError

DOCS = [
    {"id": "tides", "text": "The tide rises twice a day because the moon pulls the ocean.", "metadata": {"k": 1}},
    {"id": "bread", "text": "Bread riots spread in 1789 when flour prices doubled. 🍞 Crowds marched."},
]


@pytest.fixture(scope="module")
def client(stack, api) -> RetrieveClient:
    return RetrieveClient(stack.api_url, timeout=60)


def test_health_version_retrieve_and_errors(client):
    assert client.health()["status"] == "ok"
    assert client.version()["version"]
    out = client.retrieve("what makes the tide rise", DOCS, {"top_k": 1})
    assert out["results"][0]["doc_id"] == "tides" and out["results"][0]["metadata"] == {"k": 1}
    with pytest.raises(RetrieveError) as err:
        client.retrieve("", DOCS)
    assert err.value.code == "UNPROCESSABLE" and err.value.status == 422 and err.value.trace_id
    assert err.value.retryable is False
    with pytest.raises(RetrieveError) as err:
        RetrieveClient("http://127.0.0.1:9", timeout=2).health()
    assert err.value.retryable


def test_async_job_polling(client):
    accepted = client.retrieve_async("flour prices", DOCS)
    job = client.wait_job(accepted["job_id"], timeout=120)
    assert client.job_result(job)["results"][0]["doc_id"] == "bread"


def test_search_over_the_stored_corpus(client):
    out = client.search("dassai", k=3)
    assert "hits" in out and isinstance(out["hits"], list)


def test_langchain_retrievers(stack, api):
    from langchain_core.documents import Document

    from clients.langchain import YanaRetriever, YanaSearchRetriever

    r = YanaRetriever(base_url=stack.api_url, documents=DOCS, options={"top_k": 1})
    docs = r.invoke("why did crowds march over bread")
    assert len(docs) == 1 and isinstance(docs[0], Document) and docs[0].id == "bread"
    assert 0 <= docs[0].metadata["score"] <= 1 and docs[0].metadata["spans"]
    lc_docs = [Document(page_content=d["text"], id=d["id"]) for d in DOCS]
    assert YanaRetriever(base_url=stack.api_url, documents=lc_docs).invoke("moon and ocean")[0].id == "tides"
    assert isinstance(YanaSearchRetriever(base_url=stack.api_url, k=2).invoke("sake"), list)


def test_llamaindex_retrievers(stack, api):
    from llama_index.core.schema import NodeWithScore

    from clients.llamaindex import YanaRetriever, YanaSearchRetriever

    nodes = YanaRetriever(stack.api_url, DOCS, options={"top_k": 2}).retrieve("moon and ocean")
    assert isinstance(nodes[0], NodeWithScore) and nodes[0].node.metadata["doc_id"] == "tides"
    assert nodes[0].score >= nodes[-1].score
    assert isinstance(YanaSearchRetriever(stack.api_url, k=2).retrieve("sake"), list)


HARBOUR = (
    "The harbour of Otaru froze over in a hard winter. The frozen harbour stopped the herring boats of Otaru. "
    "Otaru's harbour master wrote about the frozen harbour every day. That winter was the winter of 1947. "
    "Spring came late."
)
QUERY = "when did the harbour of Otaru freeze over"
PDOCS = [*DOCS, {"id": "harbour", "text": HARBOUR}]


def _spans_inside(text: str, spans: list[dict]) -> None:
    raw = text.encode("utf-8")
    assert spans and all(0 <= s["start"] < s["end"] <= len(raw) for s in spans)


def test_client_passes_the_passage_mode(client):
    texts = {}
    for mode in ("chunk", "window", "document"):
        top = client.retrieve(QUERY, PDOCS, {"top_k": 1}, passage=mode)["results"][0]
        assert top["doc_id"] == "harbour"
        _spans_inside(top["text"], top["spans"])
        texts[mode] = top["text"]
    assert texts["chunk"] == texts["document"] == HARBOUR and "1947" not in texts["window"]
    job = client.wait_job(client.retrieve_async(QUERY, PDOCS, passage="window")["job_id"], timeout=120)
    assert client.job_result(job)["results"][0]["text"] == texts["window"]


def test_langchain_and_llamaindex_pass_the_passage_mode(stack, api):
    from clients.langchain import YanaRetriever as LC
    from clients.llamaindex import YanaRetriever as LI

    lc = {m: LC(base_url=stack.api_url, documents=PDOCS, passage=m).invoke(QUERY)[0] for m in ("chunk", "window")}
    assert lc["chunk"].page_content == HARBOUR and "1947" not in lc["window"].page_content
    _spans_inside(lc["window"].page_content, lc["window"].metadata["spans"])
    li = {m: LI(stack.api_url, PDOCS, passage=m).retrieve(QUERY)[0] for m in ("document", "window")}
    assert li["document"].node.get_content() == HARBOUR and "1947" not in li["window"].node.get_content()
    _spans_inside(li["window"].node.get_content(), li["window"].node.metadata["spans"])


def test_missing_extra_names_it():
    code = (
        "import sys; sys.modules['langchain_core'] = None; sys.modules['llama_index'] = None\n"
        "for m in ('clients.langchain', 'clients.llamaindex'):\n"
        "    try:\n        __import__(m)\n    except ImportError as e:\n        print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "yana[langchain]" in out and "yana[llamaindex]" in out


def test_clients_import_without_network():
    """llama-index-core must import with no network (some versions fetch NLTK data on import)."""
    code = (
        "import socket\n"
        "def deny(*a, **k):\n    raise OSError('network disabled')\n"
        "socket.socket.connect = deny; socket.create_connection = deny; socket.getaddrinfo = deny\n"
        "import clients.llamaindex, clients.langchain, clients.retrieve\nprint('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout.strip().endswith("ok"), res.stderr[-2000:]
