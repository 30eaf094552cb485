"""The DPSDP refinement Serve app over real HTTP: a policy trained at the tiny recipe and saved to a file
answers a batch of questions with the same answers and feedback as a direct ``refine`` call of that
policy, majority and final agree with the answers, GET /policy gives its metadata, and bad bodies get
4xx JSON naming the field (413 for a question over the context budget) while the replica stays up."""

from __future__ import annotations

import pytest
import requests

from _timing import limit
from rayml.actors.serve import refine as app_module
from rayml.alignment import dpsdp as dp
from rayml.alignment import dpsdp_policy as P

pytestmark = pytest.mark.slow  # starts Serve over HTTP

QUESTIONS = ["317+845=", "1234+5678=", "rev:90817=", "sort:3141=", "317+845="]


@pytest.fixture(scope="module")
def policy_file(ray_kwargs, tmp_path_factory):
    from rayml import runtime

    runtime.connect(**ray_kwargs)
    policy = P.train_policy({"collect_temperature": 2.0}, size="tiny", seed=0)  # D0 pairs: the actor moves
    return str(P.save_policy(policy, tmp_path_factory.mktemp("policy") / "tiny.npz"))


@pytest.fixture(scope="module")
def url(serve_app, policy_file):
    with serve_app(app_module.build(policy=policy_file), "refine", "/dpsdp") as base:
        yield base


def _post(url, body):
    return requests.post(f"{url}/refine", json=body, timeout=limit(120))


def test_answers_equal_a_direct_refine_call_of_the_policy(url, policy_file):
    r = _post(url, {"questions": QUESTIONS, "turns": 4})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["turns"] == 4 and body["system"] == "dpsdp" and len(body["results"]) == len(QUESTIONS)
    actor, critic, tok = P.load_policy(policy_file).models()
    ro = dp.refine(actor, critic, tok, QUESTIONS, turns=4)
    for q, res, answers, feedback in zip(QUESTIONS, body["results"], ro.answers, ro.feedback):
        assert res["question"] == q
        assert res["answers"] == answers and len(answers) == 4
        assert res["feedback"] == feedback and len(feedback) == 3
        assert res["majority"] == dp.majority_vote(answers) and res["final"] == answers[-1]
    assert body["results"][0] == body["results"][-1]  # greedy: the same question, the same episode
    one = _post(url, {"questions": QUESTIONS[:1]}).json()  # default turns: 5
    assert len(one["results"][0]["answers"]) == 5 and one["turns"] == 5


def test_get_policy_gives_the_metadata(url, policy_file):
    r = requests.get(f"{url}/policy", timeout=limit(60))
    assert r.status_code == 200, r.text
    info = r.json()
    meta = P.load_policy(policy_file).meta
    assert info["source"] == policy_file and info["system"] == "dpsdp"
    assert info["beta"] == P.DEFAULT_BETA and info["lr"] == P.DEFAULT_LR and info["seed"] == 0
    assert info["recipe"] == meta["recipe"] and info["pairs"] == meta["pairs"] and info["steps"] == meta["steps"]
    assert info["limits"]["max_questions"] == app_module.MAX_QUESTIONS
    assert info["limits"]["max_turns"] == app_module.MAX_TURNS


@pytest.mark.parametrize("payload, status, needle", [
    ({"questions": ["317+845="], "temperature": 1.0}, 422, "'temperature'"),
    ({"questions": ["1+1="] * (app_module.MAX_QUESTIONS + 1)}, 422, "'questions'"),
    ({"questions": []}, 422, "'questions'"),
    ({"turns": 3}, 422, "'questions'"),
    ({"questions": ["317+845="], "turns": 0}, 422, "'turns'"),
    ({"questions": ["317+845="], "turns": app_module.MAX_TURNS + 1}, 422, "'turns'"),
    ({"questions": ["317+845="], "turns": "5"}, 422, "'turns'"),
    ({"questions": ["317+845="], "turns": 2.5}, 422, "'turns'"),
    ({"questions": [""]}, 422, "must not be empty"),
    ({"questions": ["317+845"]}, 422, "end with '='"),
    ({"questions": ["31|7+845="]}, 422, "must not contain '|'"),
    ({"questions": ["317+845=\n="]}, 422, "printable ASCII"),
    ({"questions": ["317+84\u00e9="]}, 422, "printable ASCII"),
    ({"questions": [317]}, 422, "'questions.0'"),
    ({"questions": ["1+1=", "9" * 300 + "+1="]}, 413, "'questions.1' spans"),
    ({"questions": ["9" * 2000 + "="]}, 422, "characters"),
    (["317+845="], 422, "'body'"),
])
def test_bad_bodies_get_4xx_and_the_replica_stays_up(url, payload, status, needle):
    r = _post(url, payload)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]
    ok = _post(url, {"questions": ["1+1="], "turns": 2})
    assert ok.status_code == 200 and len(ok.json()["results"][0]["answers"]) == 2


def test_other_methods_and_a_body_over_the_cap(url):
    assert requests.get(f"{url}/refine", timeout=limit(60)).status_code == 405
    big = requests.post(f"{url}/refine", data=b"{" + b" " * (app_module.MAX_BODY + 10) + b"}",
                        headers={"content-type": "application/json"}, timeout=limit(60))
    assert big.status_code == 413 and "error" in big.json()


def test_build_rejects_bad_arguments():
    with pytest.raises(ValueError, match="policy"):
        app_module.build(policy="best")
    with pytest.raises(ValueError, match="size"):
        app_module.build(size="huge")
    with pytest.raises(ValueError, match="seed"):
        app_module.build(seed=-1)


def test_the_serve_run_builder_parses_its_string_arguments():
    app = app_module.app_builder({"policy": "reference", "size": "tiny", "seed": "3", "train_if_missing": "true"})
    assert type(app).__name__ == "Application"
    for args, match in (({"policy": "best"}, "policy"), ({"seed": "-1"}, "seed"), ({"size": "huge"}, "size"),
                        ({"train_if_missing": "maybe"}, "train_if_missing"), ({"port": "1"}, "port")):
        with pytest.raises(ValueError, match=match):
            app_module.app_builder(args)
