"""A 2-layer LlamaForCausalLM (grouped-query attention, RoPE, RMSNorm) whose weights are set by
hand so that four of its eight heads ARE what they are called, and the induction head's copy is
the model's prediction; the other four heads keep random weights (their output projection is
zeroed in layer 0, and scaled down in layer 1, so they leave the residual stream nearly alone):

    layer 0 head 0   attention sink   BOS gets ~all the weight; the rest goes to the token itself
    layer 0 head 1   previous token   a rotary phase that peaks one position back
    layer 1 head 0   induction        query = my token, key = the token before you (K-composition:
                                      written into the residual stream by layer 0 head 1); value =
                                      your token, written out for lm_head to read (the copy)
    layer 1 head 1   duplicate token  query = key = my token, and a rotary term that sinks the
                                      query's own position (else a token's best copy is itself)
    layer 0 heads 2-3, layer 1 heads 2-3: random (their key-value head 1 is random too)

Heads 0 and 1 of a layer share key-value head 0 (4 query heads, 2 key-value heads), so each pair
of designed heads reads ONE key vector and each picks its own part of it with its query.

How RoPE is tamed. Rotary pair p of a head (dims p and p + 64, head_dim 128, rope_theta 1e6)
turns by Delta * theta_p between query and key, theta_p = 1e6 ** (-p / 64): theta_0 = 1 rad down
to theta_63 = 1.2e-6. The score of one pair is Re(z_q conj(z_k) e^(i Delta theta_p)) for the pair
read as a complex number z = x_p + i x_(p+64). So:

* content (which token) goes into the slow pairs 32-63 (theta at most 1e-3: over the <= 24 positions
  used they turn by at most 0.024 rad), where q . k is the plain dot product of two token codes;
* position goes into the fast pairs 0-15 with k = 1 (a constant) and z_q chosen: z_q = e^(-i theta)
  scores cos((Delta - 1) theta), largest one token back; z_q = 1 scores cos(Delta theta), largest
  on the token itself; the duplicate head's 16 pairs are a least-squares fit of "-1 at Delta = 0,
  0 at Delta = 1..24" (the query's own position sunk, every earlier one alike).

The residual stream (hidden 128) holds [1 constant (dim 0) | word flag (1) | BOS flag (2) | the
token's code (3-34) | the previous token's code (35-66, written by layer 0 head 1) | the copied
token's code (67-98, written by layer 1 head 0) | 0 (99-127)]; codes are rows of a 32 x 32
Hadamard matrix (exactly orthogonal) for the tokens of ``SENTENCES``, random +-1 for the rest.
Every piece has a fixed norm, so RMSNorm only scales by a known constant (s0 in layer 0, s1 in
layer 1, 1 at the final norm) and the products below survive it. The MLPs are zero.

The copy, end to end (the OV circuit of layer 1 head 0 and the unembedding):

    v_proj, key-value head 0   v = code / s1 -> v = the attended token's code        (HEAD_DIM,) dims 0-31
    o_proj, head 0             z[:32] -> residual dims 67-98 (identity)             (HIDDEN, HEAD_DIM)
    lm_head                    logit_v = UNEMBED_GAIN * code_v . x[67:99]            (V, HIDDEN)

On ``BOS A B ... Z A B ... Y`` (distinct coded tokens) the induction head at Y puts ~1 of its
weight on Z (the key whose previous token is Y scores INDUCTION_LOGIT = 16, every other 0), so
x[67:99] = code(Z), |x|^2 = 16 + 16 + 32 + 32 + 32 = 128 and the final norm's scale is 1: Z's
logit is 32, every other coded token's 0 (the Hadamard rows are orthogonal), and an uncoded
token's code_v . code(Z) is a sum of 32 random signs (|.| of 16 or more for ~1 in 140): p(Z) >
0.999. With the induction head's output zeroed nothing writes to dims 67-98 but the random heads,
and p(Z) falls to ~1/V (under 0.02). Ablating the previous-token head (layer 0 head 1) also breaks
the copy: it is the K-composition the induction head's keys are made of. No other head writes what
lm_head reads: the sink and layer 0's random heads write nothing (o_proj zero), the previous-token
head writes dims 35-66 and the duplicate head nothing (o_proj zero: its value is the same code as
the induction head's, so any write of it would be a second, competing copy). Layer 1's random
heads keep their random o_proj times RANDOM_WRITE = 0.1: each writes a vector of norm ~1 (the two
together at most 2.3 on the sentences) against the copy's sqrt(32) = 5.7, so it moves any logit by
at most |code_v| * 1 ~ 5.7 (Cauchy-Schwarz) against the copy's margin of 32, and the final norm's
scale by a few percent: p(Z) stays > 0.99.

A copy is unambiguous only where the current token occurred once before: in "she sells sea
shells" repeated up to its last "he", that "he" has three earlier copies, followed by "Ġs", "lls"
and "Ġs"; the induction head splits its weight over the three, and "Ġs" wins.

    build_head_llama(dir) -> dir   (with sentences.txt: the sentences the heads are scored on)
    induction_pair(model) -> (clean ids, corrupted ids, Target)   the induction head's patching pair
"""

from __future__ import annotations

from pathlib import Path

from attncli.causal.target import Target

SENTENCES = ["the cat sat on the mat", "a dog and a cat", "she sells sea shells", "time flies like an arrow"]
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, CODE = 128, 4, 2, 128, 32
ROPE_THETA, POSITIONS = 1e6, 24  # a sentence of n tokens is scored repeated: 2n <= POSITIONS
HALF = HEAD_DIM // 2
C = 4.0  # the constant, and each flag: |x|^2 = 16 + 16 + 32 = 64 in layer 0, + 32 = 96 in layer 1
SINK_PAIR, SELF_PAIR, PREV_PAIR = 63, 6, 8  # theta: 1.2e-6, 0.27, 0.18
INDUCTION_PAIRS, DUPLICATE_PAIRS, DUP_POSITION_PAIRS = range(32, 48), range(48, 64), range(0, 16)
# logits (after the 1/sqrt(head_dim) scaling): each margin is >= 8 (the winner gets >= 0.999 of a row)
SELF_LOGIT = 8.0 / 0.0372  # (1 - cos theta_6) * 215 = 8 over the neighbours
SINK_GAP = 8.0  # BOS over the token itself
PREV_LOGIT = 10.0 / 0.0158  # (1 - cos theta_8) * 633 = 10 over the neighbours
INDUCTION_LOGIT = 16.0
UNEMBED_GAIN = 1.0  # lm_head = gain * code on the copy dims: the copied token's logit is gain * 32
RANDOM_WRITE = 0.1  # layer 1's random heads' o_proj, scaled down (init std 0.1 -> 0.01)
DUP_SINK, DUP_MATCH = 30.0, 20.0  # the positional term's scale; a copy's content score


def hadamard(n: int):
    import numpy as np

    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def thetas():
    import numpy as np

    return ROPE_THETA ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)  # (HALF,) theta_p, as transformers computes them


def duplicate_position_fit():
    """(a, b) per pair of DUP_POSITION_PAIRS: sum_p a_p cos(D theta_p) + b_p sin(D theta_p) ~ -1 at
    D = 0 and ~0 at D = 1..POSITIONS (ridge least squares: f(0) = -0.98, |f(D >= 1)| < 0.08; times DUP_SINK = 30, the
    query's own position sits 27 logits below every earlier one, which differ by at most 4)."""
    import numpy as np

    th = thetas()[list(DUP_POSITION_PAIRS)]
    delta = np.arange(POSITIONS + 1)[:, None]  # (D, 1)
    A = np.concatenate([np.cos(delta * th), np.sin(delta * th)], axis=1)  # (D, 2 * pairs)
    target = np.zeros(POSITIONS + 1)
    target[0] = -1.0
    x = np.linalg.solve(A.T @ A + 1e-4 * np.eye(A.shape[1]), A.T @ target)
    n = len(th)
    return x[:n], x[n:], A @ x  # a, b, f(D) for D = 0..POSITIONS


def build_head_llama(directory: Path) -> Path:
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from _llama_fixtures import build_tokenizer
    from _transformer_fixtures import _seed

    directory = Path(directory)
    tokenizer = build_tokenizer()
    ids = [tokenizer(s)["input_ids"] for s in SENTENCES]
    used = sorted({i for s in ids for i in s})
    assert len(used) <= CODE, f"{len(used)} distinct tokens: more than the {CODE} Hadamard rows"
    assert all(2 * len(s) <= POSITIONS for s in ids), "a sentence repeated must fit in POSITIONS"
    bos = tokenizer.bos_token_id
    assert all(s[0] == bos for s in ids)
    _seed()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, intermediate_size=32,
                         max_position_embeddings=64, rms_norm_eps=1e-6, initializer_range=0.1,
                         tie_word_embeddings=False, bos_token_id=bos, eos_token_id=tokenizer.eos_token_id,
                         rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    model = LlamaForCausalLM(config).eval()
    rng = np.random.default_rng(0)
    V = len(tokenizer)
    codes = rng.choice([-1.0, 1.0], size=(V, CODE))  # |code| = sqrt(32) = C * sqrt(2)
    codes[used] = hadamard(CODE)[: len(used)]
    emb = np.zeros((V, HIDDEN))
    emb[:, 0] = C
    emb[:, 1] = C
    emb[bos, 1], emb[bos, 2] = 0.0, C  # BOS: the BOS flag instead of the word flag
    emb[:, 3 : 3 + CODE] = codes
    s0, s1 = np.sqrt(HIDDEN / 64.0), np.sqrt(HIDDEN / 96.0)  # RMSNorm's scale in layers 0 and 1
    root = np.sqrt(HEAD_DIM)  # logits = q . k / root
    code, prev_code, copy = (slice(3 + i * CODE, 3 + (i + 1) * CODE) for i in range(3))

    def put(W, row0, pair, value, col):  # the complex value into pair `pair` of the head at row0, from input dim col
        W[row0 + pair, col] += value.real
        W[row0 + pair + HALF, col] += value.imag

    def code_block(W, row0, pairs, cols, gain):  # a 32-dim code (input cols) into 16 slow pairs (their 32 dims)
        rows = [row0 + p for p in pairs] + [row0 + p + HALF for p in pairs]
        W[rows, cols] = gain * np.eye(CODE)

    sd = model.state_dict()
    new = {k: v.clone() for k, v in sd.items()}
    q0, k0, v0, o0 = (sd[f"model.layers.0.self_attn.{n}_proj.weight"].numpy().copy() for n in "qkvo")
    q1, k1, v1, o1 = (sd[f"model.layers.1.self_attn.{n}_proj.weight"].numpy().copy() for n in "qkvo")
    q0[: 2 * HEAD_DIM], k0[:HEAD_DIM], v0[:HEAD_DIM] = 0.0, 0.0, 0.0  # query heads 0-1 and key-value head 0: set below
    q1[: 2 * HEAD_DIM], k1[:HEAD_DIM], v1[:HEAD_DIM] = 0.0, 0.0, 0.0
    o0[:] = 0.0  # layer 0 writes only the previous token's code (head 1)
    # layer 0, key-value head 0: k = [1 in PREV_PAIR (every token) | 1 in SELF_PAIR (words) | 1 in SINK_PAIR (BOS)]
    put(k0, 0, PREV_PAIR, 1.0 / (s0 * C), 0)
    put(k0, 0, SELF_PAIR, 1.0 / (s0 * C), 1)
    put(k0, 0, SINK_PAIR, 1.0 / (s0 * C), 2)
    v0[:CODE, code] = np.eye(CODE) / s0  # v = the token's code
    # head 0, the sink: BOS at SELF_LOGIT + SINK_GAP, the token itself at SELF_LOGIT, the one before ~8 less
    put(q0, 0, SELF_PAIR, complex(SELF_LOGIT * root / (s0 * C)), 0)
    put(q0, 0, SINK_PAIR, complex((SELF_LOGIT + SINK_GAP) * root / (s0 * C)), 0)
    # head 1, previous token: z_q = e^(-i theta) scores cos((Delta - 1) theta)
    th = thetas()
    put(q0, HEAD_DIM, PREV_PAIR, PREV_LOGIT * root / (s0 * C) * np.exp(-1j * th[PREV_PAIR]), 0)
    o0[prev_code, HEAD_DIM : HEAD_DIM + CODE] = np.eye(CODE)  # head 1's value (the code) -> previous-code dims
    # layer 1, key-value head 0: k = [previous code (INDUCTION_PAIRS) | code (DUPLICATE_PAIRS) | 1 (DUP_POSITION_PAIRS)]
    code_block(k1, 0, INDUCTION_PAIRS, prev_code, 1.0 / s1)
    code_block(k1, 0, DUPLICATE_PAIRS, code, 1.0 / s1)
    for p in DUP_POSITION_PAIRS:
        put(k1, 0, p, 1.0 / (s1 * C), 0)
    # head 0, induction: q = my code, so q . k = 32 where the key's previous token is my token
    code_block(q1, 0, INDUCTION_PAIRS, code, INDUCTION_LOGIT * root / (CODE * s1))
    # head 1, duplicate token: my code against yours, plus DUP_SINK * f(Delta) with f(0) ~ -1
    code_block(q1, HEAD_DIM, DUPLICATE_PAIRS, code, DUP_MATCH * root / (CODE * s1))
    a, b, _ = duplicate_position_fit()
    for p, ap, bp in zip(DUP_POSITION_PAIRS, a, b):  # z_q = a - i b scores a cos + b sin
        put(q1, HEAD_DIM, p, DUP_SINK * root / (s1 * C) * complex(ap, -bp), 0)
    # the copy (OV circuit of layer 1 head 0): v = the attended token's code, written into the copy dims
    v1[:CODE, code] = np.eye(CODE) / s1  # kv head 0's value: the code; the duplicate head reads it too
    o1[:, : 2 * HEAD_DIM] = 0.0  # head 0 writes only the copy; the duplicate head (1) writes nothing
    o1[copy, :CODE] = np.eye(CODE)  # (HIDDEN, heads * HEAD_DIM): head 0's z[:CODE] -> copy dims
    o1[:, 2 * HEAD_DIM:] *= RANDOM_WRITE  # heads 2-3: random, small beside the copy
    unembed = np.zeros((V, HIDDEN))  # (V, HIDDEN) lm_head: reads the copy dims only
    unembed[:, copy] = UNEMBED_GAIN * codes
    t = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    new.update({"model.embed_tokens.weight": t(emb),
                "model.layers.0.self_attn.q_proj.weight": t(q0), "model.layers.0.self_attn.k_proj.weight": t(k0),
                "model.layers.0.self_attn.v_proj.weight": t(v0), "model.layers.0.self_attn.o_proj.weight": t(o0),
                "model.layers.1.self_attn.q_proj.weight": t(q1), "model.layers.1.self_attn.k_proj.weight": t(k1),
                "model.layers.1.self_attn.v_proj.weight": t(v1), "model.layers.1.self_attn.o_proj.weight": t(o1),
                "lm_head.weight": t(unembed)})
    for name in list(new):
        if ".mlp.down_proj." in name:
            new[name] = torch.zeros_like(new[name])
        if name.endswith("norm.weight"):  # the layers' two norms and the final one
            new[name] = torch.ones_like(new[name])
    model.load_state_dict(new, strict=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "sentences.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    return directory


def induction_pair(model, seed: int = 1) -> tuple[list[int], list[int], Target]:
    """The pair on which patching finds the two heads of the copy (layer 1 head 0, the induction head,
    and layer 0 head 1, the previous-token head it reads), for ``model`` loaded from build_head_llama:
    clean = BOS, a run of 8 coded tokens, the run again but its last; corrupted = the same with
    another run first (nothing to copy). The metric is a logit difference (the copied token against
    the corrupted first half's last one) at the last position: log p's own log-softmax saturates on
    the corrupted run (p of the copy ~1/V), which no linear estimate follows."""
    import numpy as np

    coded = sorted({i for s in SENTENCES for i in model.encode(s).ids[1:]})
    bos = model.encode(SENTENCES[0]).ids[0]
    rng = np.random.default_rng(seed)  # another seed: another run of coded tokens
    run = [int(i) for i in rng.choice(coded, size=8, replace=False)]
    other = [int(i) for i in rng.choice([c for c in coded if c not in run], size=8, replace=False)]
    clean, corrupt = [bos] + run + run[:-1], [bos] + other + run[:-1]
    return clean, corrupt, Target(len(clean) - 1, run[-1], "copied", other[-1], "other")


if __name__ == "__main__":  # docs/causal.md: `python tests/_llama_head_fixtures.py induction-llama` from a clone
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python tests/_llama_head_fixtures.py FOLDER")
    try:
        build_head_llama(Path(sys.argv[1]))
    except ImportError as exc:  # torch, transformers, or pytest (the fixtures' conftest): the test extra
        from attncli.env.extras import install_command

        sys.exit(f"error: building the model needs {exc.name or exc}, which is not installed: the test extra, "
                 f"{install_command('test')}")
    print(f"{sys.argv[1]}: a 2-layer Llama built by hand (a previous-token head L0H1, an induction head L1H0)")
