"""The Llama-class causal LM a trial trains: built from ``model.config`` in code, or loaded from ``model.uri``;
LoRA adapters via peft for ``method: lora``, every parameter trainable for ``full``/``continued_pretraining``."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lambdas.domain.trial.spec import TrialSpec
from trainer import storage
from trainer.data import IGNORE_INDEX, Tokenizer
from trainer.json_types import JsonObject
from trainer.tokenizer import ByteTokenizer, HubTokenizer


class ModelError(ValueError):
    pass


def build_tokenizer(spec: TrialSpec) -> ByteTokenizer | HubTokenizer:
    name = spec.model.tokenizer or ("byte" if spec.model.config is not None else spec.model.uri)
    if name == "byte":
        return ByteTokenizer()
    if not name:
        raise ModelError("model.tokenizer: set it to 'byte' or to a tokenizer path (or give model.uri)")
    return HubTokenizer(_local_dir(name))


def _local_dir(uri: str) -> str:
    if not storage.is_s3(uri):
        return str(storage.local_path(uri))
    target = Path(tempfile.mkdtemp(prefix="dualtrack-model-"))
    storage.sync_down(uri, target)
    return str(target)


def build_model(spec: TrialSpec, tokenizer: ByteTokenizer | HubTokenizer) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(spec.seed)  # same initial weights (and LoRA init) on every track and attempt
    if spec.model.config is not None:
        cfg = spec.model.config
        if cfg.vocab_size < tokenizer.vocab_size:
            raise ModelError(f"model.config.vocab_size is {cfg.vocab_size} but the tokenizer has "
                             f"{tokenizer.vocab_size} ids; set vocab_size >= {tokenizer.vocab_size}")
        if cfg.hidden_size % cfg.num_attention_heads or cfg.num_attention_heads % cfg.num_key_value_heads:
            raise ModelError("model.config: hidden_size must divide by num_attention_heads, and "
                             "num_attention_heads by num_key_value_heads")
        config = LlamaConfig(
            vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
            num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
            num_key_value_heads=cfg.num_key_value_heads, max_position_embeddings=max(2048, spec.sequence_length),
            pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False, use_cache=False,
        )
        config._attn_implementation = "eager"
        model: torch.nn.Module = LlamaForCausalLM(config)
    elif spec.model.uri:
        model = LlamaForCausalLM.from_pretrained(_local_dir(spec.model.uri), dtype=torch.float32,
                                                 attn_implementation="eager")
    else:
        raise ModelError("model: give model.uri (weights) or model.config (a small model built in code)")
    if spec.method in ("lora", "qlora"):
        if spec.lora is None:
            raise ModelError("lora: required for method lora")
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=spec.lora.rank, lora_alpha=spec.lora.alpha,  # type: ignore[arg-type]  # float is fine
                          lora_dropout=spec.lora.dropout, target_modules=list(spec.lora.target_modules),
                          task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    model.train()
    return model


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def token_loss_sum(model: torch.nn.Module, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed next-token cross-entropy over the tokens that carry loss (normalised by the caller)."""
    logits = model(input_ids=input_ids).logits
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction="sum")


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def weights_state(model: torch.nn.Module, full: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """What a checkpoint keeps of the model: the adapter for LoRA (peft's standard keys), else every weight. ``full``:
    the model's whole state dict where it was gathered from shards (``trainer.sharded.full_state``)."""
    if is_lora(model):
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(model, state_dict=full)
    else:
        state = model.state_dict() if full is None else full
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}


def model_keys(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint weights under the model's own state-dict names: peft's adapter keys name no adapter (peft drops
    ``.default`` when it saves), so they get it back; a full model's keys are its own."""
    if not is_lora(model):
        return tensors
    own = {k.replace(".default", ""): k for k in model.state_dict() if ".default." in k}
    missing = sorted(set(tensors) - set(own))
    if missing:
        raise ModelError(f"checkpoint adapter does not match the model: unexpected keys {missing[:3]}")
    return {own[k]: v for k, v in tensors.items()}


def load_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    if is_lora(model):
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, tensors)
        unexpected = list(getattr(result, "unexpected_keys", []) or [])
        if unexpected:
            raise ModelError(f"checkpoint adapter does not match the model: unexpected keys {unexpected[:3]}")
        return
    model.load_state_dict(tensors, strict=True)


def adapter_config(model: torch.nn.Module) -> JsonObject | None:
    if not is_lora(model):
        return None
    config: Any = model.peft_config["default"]  # type: ignore[index]  # peft's LoraConfig, an attribute peft adds
    return {k: (sorted(v) if isinstance(v, set) else v) for k, v in config.to_dict().items()}


@torch.no_grad()
def greedy_complete(model: torch.nn.Module, tokenizer: Tokenizer, prompt: str, max_new_tokens: int,
                    device: torch.device) -> tuple[str, list[int]]:
    """Fixed-length greedy completion (no early stop, so both tracks compare the same number of tokens)."""
    ids = torch.tensor([tokenizer.encode(prompt, bos=True)], dtype=torch.long, device=device)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits = model(input_ids=ids).logits[:, -1]
        token = int(torch.argmax(logits, dim=-1)[0])
        new.append(token)
        ids = torch.cat([ids, torch.tensor([[token]], dtype=torch.long, device=device)], dim=1)
    return tokenizer.decode(new), new
