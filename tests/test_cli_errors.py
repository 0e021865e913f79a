"""Bad input through the command line: one clear message on stderr that names the file and line (or key) and
what to do, exit status 2, and no traceback unless --debug.

The loaders' own error cases are covered in test_data.py and test_config.py; here each kind of mistake is
driven end to end through ``adaptive_ir.cli.main`` so the user-facing contract (message + status) is pinned.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adaptive_ir.artifacts.checkpoint import CHECKPOINT_FORMAT, save_checkpoint
from adaptive_ir.cli import main
from adaptive_ir.common.errors import AdaptiveIRError, CheckpointError
from adaptive_ir.config import load_config
from adaptive_ir.data import load_msmarco, load_trec

DOCS = [{"_id": f"d{i}", "title": f"title {i}", "text": f"alpha beta gamma{i}"} for i in range(1, 9)]
QUERIES = {f"q{i}": f"gamma{i} alpha" for i in range(1, 9)}


def write_beir(root: Path, corpus: str | bytes | None = None, queries: str | bytes | None = None,
               train: str | None = None, test: str | None = None) -> Path:
    """A tiny valid BEIR folder; any file can be replaced by raw contents to break it."""
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    files = {
        "corpus.jsonl": corpus if corpus is not None else "".join(json.dumps(d) + "\n" for d in DOCS),
        "queries.jsonl": queries if queries is not None else "".join(
            json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items()),
        "qrels/train.tsv": train if train is not None else "query-id\tcorpus-id\tscore\n" + "".join(
            f"q{i}\td{i}\t1\n" for i in range(1, 7)),
        "qrels/test.tsv": test if test is not None else "q7\td7\t1\nq8\td8\t1\n",
    }
    for name, content in files.items():
        (root / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return root


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    """(exit status, stderr) of one CLI call."""
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def assert_clean_error(rc: int, err: str, *fragments: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one message, one line
    for f in fragments:
        assert f in err, f"{f!r} not in {err!r}"


def config_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


# ----------------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize("text, fragments", [
    ("training:\n  num_epochs: [1\n", ["run.yaml:3", "malformed YAML"]),
    ("training:\n  lerning_rate: 0.001\n", ["run.yaml:2", "lerning_rate", "did you mean 'learning_rate'"]),
    ("trainng:\n  num_epochs: 1\n", ["run.yaml:1", "trainng"]),
    ("training:\n  batch_size: abc\n", ["run.yaml:2", "training.batch_size", "'abc'"]),
    ("training:\n  batch_size: 0\n", ["run.yaml:2", "training.batch_size", "got 0"]),
    ("training:\n  collect_batch_size: -4\n", ["run.yaml:2", "training.collect_batch_size", "got -4"]),
    ("training:\n  learning_rate: fast\n", ["run.yaml:2", "training.learning_rate"]),
])
def test_bad_config_file(tmp_path, capsys, text, fragments):
    rc, err = run_cli(capsys, "train", "--config", config_file(tmp_path, text), "--no-progress")
    assert_clean_error(rc, err, *fragments)


def test_exponent_strings_are_floats(tmp_path):
    # YAML 1.1 reads 3e-4 (no dot) as a string; the seed config writes learning rates that way
    cfg = load_config(config_file(tmp_path, 'training:\n  learning_rate: "3e-4"\n  clip_epsilon: 2e-1\n'),
                      {"training.entropy_coef": "1e-3"})
    assert cfg.training.learning_rate == pytest.approx(3e-4)
    assert cfg.training.clip_epsilon == pytest.approx(0.2)
    assert cfg.training.entropy_coef == pytest.approx(1e-3)


@pytest.mark.parametrize("flags, fragments", [
    (["--set", "training.batch_size=0"], ["training.batch_size"]),
    (["--set", "training.bogus=1"], ["bogus"]),
    (["--set", "no_equals_sign"], ["--set no_equals_sign", "SECTION.KEY=VALUE"]),
    (["--batch-size", "-1"], ["training.batch_size"]),
    (["--device", "gpu0"], ["gpu0", "cuda:N"]),
    (["--config", "no_such_config"], ["no_such_config", "quickstart"]),
])
def test_bad_overrides(capsys, flags, fragments):
    assert_clean_error(*run_cli(capsys, "train", *flags, "--no-progress"), *fragments)


def test_debug_shows_the_traceback(tmp_path, capsys):
    with pytest.raises(AdaptiveIRError, match="lerning_rate"):
        main(["train", "--config", config_file(tmp_path, "training:\n  lerning_rate: 1\n"), "--debug"])


# ----------------------------------------------------------------------------------------------------- data


def test_missing_data_dir_says_where_it_looked_and_what_to_do(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "scifact"
    rc, err = run_cli(capsys, "train", "--config", "scifact", "--data-dir", str(missing),
                      "--output-dir", str(tmp_path / "out"), "--no-progress")
    assert_clean_error(rc, err, str(missing), "does not exist", "BEIR/datasets/scifact.zip",
                       "configs/quickstart.yaml runs with no data")


def _beir_run(tmp_path, capsys, root: Path) -> tuple[int, str]:
    return run_cli(capsys, "train", "--set", "data.dataset_type=beir", "--data-dir", str(root),
                   "--output-dir", str(tmp_path / "out"), "--no-progress")


@pytest.mark.parametrize("broken, fragments", [
    ({"corpus": '{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": \n'}, ["corpus.jsonl:2", "not valid JSON"]),
    ({"corpus": '{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n'},
     ["corpus.jsonl:2", "duplicate document id 'd1'", "line 1"]),
    ({"queries": '{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n'},
     ["queries.jsonl:2", "duplicate query id 'q1'"]),
    ({"queries": '{"_id": "q1", "text": "a"}\n{"_id": "q2", "text": "  "}\n'},
     ["queries.jsonl:2", "'q2' has empty text"]),
    ({"train": "q1\td1\t1\nq1\tnope\t1\n"}, ["train.tsv:2", "'nope'", "not in the corpus"]),
    ({"train": "q1\td1\t1\nq404\td1\t1\n"}, ["train.tsv:2", "'q404'", "no text in the queries file"]),
    ({"corpus": b'{"_id": "d1", "text": "caf\xe9"}\n'}, ["corpus.jsonl:1", "not valid UTF-8", "iconv"]),
])
def test_bad_beir_files(tmp_path, capsys, broken, fragments):
    root = write_beir(tmp_path / "beir", **broken)
    assert_clean_error(*_beir_run(tmp_path, capsys, root), *fragments)


def test_hdf5_without_expected_datasets(tmp_path, capsys):
    root = tmp_path / "msa"
    root.mkdir()
    with h5py.File(root / "msa_corpus.hdf5", "w") as f:
        f["title"] = np.array([b"a", b"b"])
        f["wrong"] = np.array([b"x", b"y"])
    with h5py.File(root / "msa_dataset.hdf5", "w") as f:
        f["queries_train"] = np.array([b"q"])
    rc, err = run_cli(capsys, "train", "--set", "data.dataset_type=msa", "--data-dir", str(root),
                      "--output-dir", str(tmp_path / "out"), "--no-progress")
    assert_clean_error(rc, err, "msa_corpus.hdf5", "'text'", "dataset missing", "title, wrong")


# ----------------------------------------------------------------------------------------------------- models


def test_missing_sentence_transformers_model(tmp_path, capsys):
    rc, err = run_cli(capsys, "train", "--set", "embeddings.type=sentence-transformers",
                      "--set", f"embeddings.path={tmp_path / 'no-model'}", "--set", "embeddings.embedding_dim=null",
                      "--output-dir", str(tmp_path / "out"), "--no-progress")
    assert_clean_error(rc, err, "embeddings.path", str(tmp_path / "no-model"), "local model folder")


def test_missing_semantic_feedback_model(tmp_path, capsys):
    rc, err = run_cli(capsys, "train", "--set", "candidate_mining.feedback=semantic",
                      "--set", f"candidate_mining.reranker_path={tmp_path / 'no-model'}",
                      "--output-dir", str(tmp_path / "out"), "--no-progress")
    assert_clean_error(rc, err, "candidate_mining.reranker_path", str(tmp_path / "no-model"), "local model folder")


def test_missing_legacy_pickle(tmp_path, capsys):
    rc, err = run_cli(capsys, "train", "--set", "embeddings.type=legacy",
                      "--set", f"embeddings.path={tmp_path / 'w2v.pkl'}", "--set", "embeddings.embedding_dim=null",
                      "--output-dir", str(tmp_path / "out"), "--no-progress")
    assert_clean_error(rc, err, "w2v.pkl", "D_cbow_pdw_8B_norm.pkl", "embeddings.type: lsa")


# ----------------------------------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_missing_checkpoint(tmp_path, capsys, command):
    ckpt = tmp_path / "runs" / "last.pt"
    rc, err = run_cli(capsys, command, "--checkpoint", str(ckpt), "--output-dir", str(tmp_path / "out"),
                      "--no-progress")
    assert_clean_error(rc, err, "checkpoint not found", str(ckpt))


def test_missing_checkpoint_for_reformulate(tmp_path, capsys):
    rc, err = run_cli(capsys, "reformulate", "some query", "--checkpoint", str(tmp_path / "best.pt"))
    assert_clean_error(rc, err, "checkpoint not found", "best.pt")


def test_checkpoint_from_an_incompatible_config(tmp_path, capsys):
    ckpt = tmp_path / "other.pt"
    save_checkpoint(ckpt, {"format": CHECKPOINT_FORMAT, "spec": {"rl_agent.hidden_dim": 32},
                           "counters": {"update": 3}})
    rc, err = run_cli(capsys, "train", "--checkpoint", str(ckpt), "--output-dir", str(tmp_path / "out"),
                      "--no-progress")
    assert_clean_error(rc, err, "other.pt", "does not fit this setup: rl_agent.hidden_dim: checkpoint 32 vs this "
                       "setup 64", "start a new run")


def test_corrupt_checkpoint(tmp_path, capsys):
    ckpt = tmp_path / "last.pt"
    save_checkpoint(ckpt, {"format": CHECKPOINT_FORMAT, "counters": {"update": 1}, "x": list(range(100))})
    data = bytearray(ckpt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ckpt.write_bytes(bytes(data))
    rc, err = run_cli(capsys, "evaluate", "--checkpoint", str(ckpt), "--no-progress")
    assert_clean_error(rc, err, "last.pt", "checksum mismatch")
    Path(str(ckpt) + ".json").unlink()  # without its sidecar a damaged file still fails to unpickle
    ckpt.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable adaptive-ir checkpoint"):
        main(["evaluate", "--checkpoint", str(ckpt), "--debug"])


# ----------------------------------------------------------------------------------------------------- fuzzing
# test_data.py fuzzes the BEIR loader; these cover the config loader and the TREC / MS MARCO tsv readers.

_YAML_PIECES = st.sampled_from([
    "training:", "  num_epochs: 2", "  learning_rate: 3e-4", "  batch_size: -1", "rl_agent:", "  hidden_dim: x",
    "data:", "  dataset_type: beir", "  - item", "[", "{a: 1}", "key: {b: [1, 2}", "\t", ": :", "&a x", "*a",
    "!!python/object:os.system",
    "embeddings:", "  type: nope", "  embedding_dim: null", "system: 3", "---", "...", "? complex",
])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.text(max_size=120), st.lists(_YAML_PIECES, max_size=8).map("\n".join)))
def test_random_yaml_gives_a_config_or_a_config_error(tmp_path, text):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_config(str(path))
    except AdaptiveIRError:
        pass


_TSV_LINES = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["1\tquery one", "2\t", "d1\ttext", "d1\ttitle\ttext", "1 0 d1 1", "1\t0\td1\tx", "a\tb\tc\td\te",
                     "<top>", "<num> Number: 5", "<title> t", "</top>"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["topics", "qrels", "corpus"]),
       garbage=st.one_of(st.binary(max_size=120),
                         st.lists(_TSV_LINES, max_size=6).map(lambda ls: "\n".join(ls).encode("utf-8", "replace"))))
def test_tsv_garbage_gives_a_collection_or_a_data_error(tmp_path, which, garbage):
    files = {"topics": b"1\tquery one\n2\tquery two\n", "qrels": b"1 0 d1 1\n2 0 d2 1\n",
             "corpus": b"d1\tfirst doc\nd2\tsecond doc\n"}
    files[which] = garbage
    for name, content in files.items():
        (tmp_path / f"{name}.tsv").write_bytes(content)
    try:
        load_trec(tmp_path / "topics.tsv", {"test": tmp_path / "qrels.tsv"}, tmp_path / "corpus.tsv")
    except AdaptiveIRError:
        pass
    ms = tmp_path / "msmarco"
    ms.mkdir(exist_ok=True)
    for name, content in {"collection.tsv": files["corpus"], "queries.train.tsv": files["topics"],
                          "queries.dev.tsv": b"9\tdev query\n", "qrels.train.tsv": files["qrels"],
                          "qrels.dev.tsv": b"9\t0\td1\t1\n"}.items():
        (ms / name).write_bytes(content)
    try:
        load_msmarco(ms)
    except AdaptiveIRError:
        pass


@pytest.mark.parametrize("command", [None, "train", "evaluate", "compare", "oracle", "reformulate", "export"])
def test_help_is_plain_text(command, capsys):
    # argparse prints descriptions and help strings as they are: no reST markup from docstrings
    with pytest.raises(SystemExit) as done:
        main([command, "--help"] if command else ["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and out.startswith("usage: adaptive-ir")
    assert "``" not in out and ":func:" not in out
