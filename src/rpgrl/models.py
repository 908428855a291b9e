"""Tiny local models and tokenizers: everything built from a config, nothing downloaded.

- `build_char_tokenizer(chars)`: one token per character of a fixed alphabet (the embedded synthetic task).
- `build_byte_tokenizer()`: byte-level, so any UTF-8 text round-trips (tests, `rpgrl eval` with a tiny model).
- `build_tiny_model(tokenizer, ...)`: a randomly initialised Qwen2/Qwen3 causal LM in float32.
- `load_model(path)`: a model and tokenizer from a local Hugging Face folder (`load_tokenizer`: only the latter).

Both tokenizers are `transformers.PreTrainedTokenizerFast` objects backed by the `tokenizers` library, with
`<pad>`, `<eos>` and `<bos>` special tokens; encoding with special tokens prepends `<bos>` (a fixed first token
for every prompt). The byte tokenizer carries a minimal chat template, so code written for a real chat model (render
the `[{"role": "user", ...}]` message with `apply_chat_template`) runs unchanged on it; the character tokenizer
carries one only when its alphabet can spell the template (otherwise every rendered prompt would fail to encode, and
prompts are encoded as plain text with `<bos>`). They save and load with
`save_pretrained` and load back with `load_model` (not `AutoTokenizer`: transformers 5 swaps in the Qwen2
tokenizer class for a Qwen2 folder, which re-splits text differently).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from rpgrl.errors import UsageError, first_line

PAD, EOS, BOS = "<pad>", "<eos>", "<bos>"
SPECIAL_TOKENS = (PAD, EOS, BOS)  # ids 0, 1, 2 in both tokenizers

# A chat template for the tiny tokenizers: "<|user|>\n{content}\n<|assistant|>\n" (markers are plain text).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


# Every character CHAT_TEMPLATE writes for a user turn and the generation prompt.
_TEMPLATE_CHARS = frozenset("<|>\nuserassistant")


def _wrap(tok: Tokenizer, *, chat_template: bool = True) -> PreTrainedTokenizerFast:
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, bos_token=BOS, padding_side="left"
    )
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def build_char_tokenizer(chars: str) -> PreTrainedTokenizerFast:
    """One token per character of `chars` (ids 3, 4, ... in order), after `<pad>`=0, `<eos>`=1, `<bos>`=2.

    A character outside `chars` raises on encoding (there is no unknown token: the synthetic task never needs one,
    and a silent `<unk>` would hide a bug). No chat template unless `chars` holds every character of
    CHAT_TEMPLATE's markers (the synthetic alphabet does not).

    >>> tok = build_char_tokenizer("0123456789+")
    >>> tok("1+2", add_special_tokens=False)["input_ids"]
    [4, 13, 5]
    """
    if len(set(chars)) != len(chars):
        raise ValueError(f"build_char_tokenizer: duplicate characters in {chars!r}")
    if not chars:
        raise ValueError("build_char_tokenizer: empty character set")
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    vocab.update({c: i + len(SPECIAL_TOKENS) for i, c in enumerate(chars)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character alone
    tok.decoder = decoders.Fuse()  # concatenate, no spaces between tokens
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return _wrap(tok, chat_template=_TEMPLATE_CHARS <= set(chars))


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level tokenizer: 3 special tokens + 256 byte tokens, no merges, so any UTF-8 text round-trips.

    >>> tok = build_byte_tokenizer()
    >>> tok.decode(tok("héllo ∑")["input_ids"], skip_special_tokens=True)
    'héllo ∑'
    """
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    vocab.update({c: i + len(SPECIAL_TOKENS) for i, c in enumerate(alphabet)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return _wrap(tok)


def tiny_model_params(vocab: int, *, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int,
                      tie_embeddings: bool) -> int:  # fmt: skip
    """Parameters of `build_tiny_model`'s Qwen2 with these sizes, counted without building it: embeddings (and an
    untied lm_head), per layer q/k/v with biases, o, gate/up/down and two RMSNorm weights, and the final norm."""
    hd = hidden // heads
    qkv = hidden * (heads + 2 * kv_heads) * hd + (heads + 2 * kv_heads) * hd
    layer = qkv + heads * hd * hidden + 3 * hidden * ffn + 2 * hidden
    return vocab * hidden * (1 if tie_embeddings else 2) + layers * layer + hidden


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    *,
    arch: Literal["qwen2", "qwen3"] = "qwen2",
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 384,
    max_positions: int = 2048,
    tie_embeddings: bool = True,
    seed: int = 0,
) -> PreTrainedModel:
    """A randomly initialised Qwen2 (or Qwen3, which adds q/k RMS norms) causal LM in float32, in eval mode.

    The vocabulary is `len(tokenizer)`; the pad/eos/bos ids come from the tokenizer. The default (hidden 128,
    4 layers, 4 heads with 2 KV heads, FFN 384) has about 0.79M parameters with the synthetic task's alphabet.
    Initialisation is reproducible: the global torch RNG state is saved and restored around it.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if hidden % heads or heads % kv_heads or (hidden // heads) % 2:
        raise ValueError(
            f"build_tiny_model: need hidden % heads == 0, heads % kv_heads == 0 and an even head size (RoPE), got "
            f"{hidden=}, {heads=}, {kv_heads=}"
        )
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=ffn,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        use_cache=True,
    )
    if arch == "qwen2":
        config, cls = Qwen2Config(**common), Qwen2ForCausalLM
    elif arch == "qwen3":
        config, cls = Qwen3Config(head_dim=hidden // heads, **common), Qwen3ForCausalLM
    else:
        raise ValueError(f"build_tiny_model: unknown arch {arch!r}; valid: qwen2, qwen3")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config).to(torch.float32)
    # True sampling if anyone calls `generate`: no hidden top-k (see docs/cpu-default-notes.md, pitfalls).
    model.generation_config.do_sample = True
    model.generation_config.top_k = 0
    model.generation_config.top_p = 1.0
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


def load_model(path: str | Path, dtype: torch.dtype | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """(model, tokenizer) from a local Hugging Face folder (`config.json`, weights, tokenizer files), in eval mode.

    `dtype=None` keeps the dtype stored in the checkpoint. A missing folder or file, or one that does not parse
    (broken JSON, truncated weights, a `model_type` this transformers does not know), raises `UsageError`; the
    tokenizer is read first, as it is cheap.
    """
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    path = Path(path)
    tokenizer = load_tokenizer(path)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # its load report of missing/unexpected weights: we refuse those in one line
    hf_logging.disable_progress_bar()  # a load that fails prints nothing but its one line
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            path, dtype="auto" if dtype is None else dtype, output_loading_info=True
        )
    # missing/corrupt files, an unknown model_type, a config.json that is not a JSON object (TypeError/AttributeError)
    # or whose fields have the wrong type (huggingface_hub's strict dataclasses) or value (0 heads: ZeroDivisionError)
    except (*CONFIG_ERRORS, RuntimeError, SafetensorError) as e:
        if "ignore_mismatched_sizes" in str(e):  # its "see the report above": the report is silenced
            raise UsageError(f"the weights in {path} do not match its config.json: tensor shapes differ") from None
        raise UsageError(f"cannot load the model in {path}: {first_line(e)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    _check_weights_match(path, info)
    _check_weights_finite(path, model)
    return model.eval(), tokenizer


def _check_weights_finite(path: Path, model) -> None:
    """UsageError when a weight holds NaN or inf (a checkpoint saved after a diverged step): every logit would be
    NaN, and sampling or training would fail far from the cause."""
    named = list(model.named_parameters())
    bad = [name for name, p in named if p.is_floating_point() and not bool(p.isfinite().all())]
    if bad:
        raise UsageError(f"the weights in {path} hold NaN or inf in {len(bad)} of {len(named)} tensors (e.g. {bad[0]})")


def _check_weights_match(path: Path, info: dict) -> None:
    """UsageError when the weights do not fill the model config.json describes (transformers would initialise the
    missing ones at random and drop the unexpected ones): e.g. num_hidden_layers edited, or another model's files."""
    problems = []
    for key, what in (
        ("missing_keys", "missing"),
        ("unexpected_keys", "unexpected"),
        ("mismatched_keys", "mismatched"),
    ):
        names = sorted(str(k) for k in info.get(key) or ())
        if names:
            problems.append(f"{len(names)} {what} (e.g. {names[0]})")
    if problems:
        raise UsageError(f"the weights in {path} do not match its config.json: {', '.join(problems)}")


def read_config(path: str | Path):
    """The `PretrainedConfig` of the model folder `path` from its config.json alone (before the weights load); None
    when it does not load (`load_model` then names the problem)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path)
    except CONFIG_ERRORS:
        return None


def _config_errors() -> tuple[type[BaseException], ...]:
    """What loading a model folder's config.json raises when the file is wrong (not when this code is)."""
    errors: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, TypeError, AttributeError)
    try:
        from huggingface_hub.errors import StrictDataclassError  # a field of the wrong type ("vocab_size": "abc")
    except ImportError:
        return (*errors, ZeroDivisionError)
    return (*errors, ZeroDivisionError, StrictDataclassError)


CONFIG_ERRORS = _config_errors()


def config_vocab(config) -> int | None:
    """Rows of the input embedding a model declares: `config` is its folder, or its config from `read_config`; None
    if unknown (no config.json that loads, or no vocab_size)."""
    if isinstance(config, (str, Path)):
        config = read_config(config)
    vocab = None if config is None else getattr(config.get_text_config(), "vocab_size", None)
    return None if vocab is None else int(vocab)


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """The tokenizer of a local Hugging Face model folder (cheap: callers check prompts before loading weights).
    A missing folder or file, or a tokenizer file that does not parse, raises `UsageError`."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not path.is_dir():
        raise UsageError(f"model folder not found: {path}")
    if not (path / "config.json").is_file():
        raise UsageError(f"not a model folder (no config.json): {path}{_run_hint(path)}")
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        raise UsageError(f"no tokenizer files (tokenizer.json / tokenizer_config.json) in model folder: "
                         f"{path}{_run_hint(path)}")  # fmt: skip
    try:
        return _load_tokenizer(path, AutoTokenizer)
    except Exception as e:  # the `tokenizers` library raises plain Exception for a corrupt tokenizer.json
        raise UsageError(f"cannot load the tokenizer of {path}: {first_line(e)}") from None


def _run_hint(path: Path) -> str:
    """Where the model is, when `path` is a training run's directory (its config.json is the run's, not a model's)."""
    model = path / "model"
    return f" (a training run's folder: its model is {model})" if (model / "config.json").is_file() else ""


def _load_tokenizer(path: Path, auto_cls) -> PreTrainedTokenizerFast:
    # transformers 5 maps model_type "qwen2" to Qwen2Tokenizer even when tokenizer_config.json names the generic
    # class, which rebuilds a different pre-tokenizer and breaks the tiny tokenizers. Load generic ones as saved.
    import json

    cfg_file = path / "tokenizer_config.json"
    try:
        cls_name = json.loads(cfg_file.read_text()).get("tokenizer_class") if cfg_file.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
        raise ValueError(f"{cfg_file.name} is not a JSON object ({first_line(e)})") from None
    if cls_name in ("TokenizersBackend", "PreTrainedTokenizerFast") and (path / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(path)
    return auto_cls.from_pretrained(path)
