"""Mixture-of-experts layers in the form expert parallelism can shard.

`transformers` runs a layer's experts on the tokens each one is routed
(`grouped_mm` over rows sorted by expert, or a loop over the experts hit).
Which rows belong to which expert is data, so no even split of those rows
says "the tokens of my experts": a sharding rule can only keep them whole.

`dispatch` computes the same function in GShard's form. The tokens are cut
into `groups` (the batch: `[groups, tokens, hidden]`); a one-hot dispatch
tensor `[groups, tokens, experts, capacity]` gathers each expert's tokens
of each group into `[experts, groups, capacity, hidden]`, the experts run as
batched products over the expert dim, and the combine tensor (the dispatch
one weighted by the routing weights) sums each token's experts back. The
capacity is by default a group's whole token count, so no token is ever
dropped and the result equals the model's own; a `capacity_factor` gives
each expert room for that factor times its even share of the group's
routed tokens (GShard's and Switch's capacity factor, 1.25 say), and a token
past its expert's room is dropped, as theirs are.

Sharded, the groups follow the batch and the experts their weights: the
dispatched tensor goes from split by group to split by expert, and back,
over the same mesh dim. spmd's reshard plan writes each of those moves as
an all-to-all, the token dispatch and combine of expert parallelism.

    import spmd.torch.moe
    spmd.torch.moe.use(model, groups=batch)   # before spmd.torch.export
"""

import math

import torch

NAME = "spmd_dispatch"


def one_hot(index, classes, dtype):
    """`F.one_hot(index, classes)` as a comparison with `arange`: the same
    values, without the range checks `one_hot` asserts at run time (each
    one a reduction over every index, so a collective once they are split)."""
    return (index.unsqueeze(-1) == torch.arange(classes, device=index.device)).to(dtype)


def capacity_of(tokens, k, experts, factor=None):
    """An expert's room in a group of `tokens` tokens, each routed to `k`
    of `experts`: every token without a `factor`, else `factor` times the
    even share, rounded up (at least 1, at most every token)."""
    if factor is None:
        return tokens
    return max(1, min(tokens, math.ceil(factor * tokens * k / experts)))


def dispatch(self, hidden_states, top_k_index, top_k_weights, groups=1, capacity_factor=None):
    """A `transformers` experts forward (registered as `spmd_dispatch`):
    `hidden_states` `[tokens, hidden]`, `top_k_index`/`top_k_weights`
    `[tokens, k]`, the experts' `gate_up_proj` `[experts, 2·ffn, hidden]` (or
    `up_proj`) and `down_proj` `[experts, hidden, ffn]`."""
    if self.is_transposed or self.has_bias or getattr(self, "has_post_expert_norm", False):
        raise NotImplementedError(f"{type(self).__name__}: spmd's dispatch takes [out, in] expert weights without biases")
    tokens, hidden = hidden_states.shape
    experts = self.num_experts
    per_group = tokens // groups
    x = hidden_states.reshape(groups, per_group, hidden)
    # Which experts each token goes to, and with what weight: [g, s, e].
    capacity = capacity_of(per_group, top_k_index.shape[-1], experts, capacity_factor)
    chosen = one_hot(top_k_index, experts, hidden_states.dtype).reshape(groups, per_group, -1, experts)
    routed = chosen.sum(dim=2)
    weight = (chosen * top_k_weights.reshape(groups, per_group, -1, 1).to(hidden_states.dtype)).sum(dim=2)
    # A token's slot in its expert's buffer: how many of the group's tokens
    # before it went there. A slot past the capacity matches no column of
    # the one-hot: the token is dropped.
    slot = (torch.cumsum(routed, dim=1) - 1).clamp(min=0).to(torch.int64)
    place = one_hot(slot, capacity, hidden_states.dtype) * routed.unsqueeze(-1)  # [g, s, e, c]
    combine = place * weight.unsqueeze(-1)
    # The products as batched matmuls, written out so that each merge of two
    # dims keeps the one a plan splits major: (experts, capacity) and
    # (groups, capacity), never capacity first.
    g, s, e, c, h = groups, per_group, experts, capacity, hidden
    dispatched = torch.bmm(place.reshape(g, s, e * c).transpose(1, 2), x)  # [g, (e c), h]
    dispatched = dispatched.reshape(g, e, c, h).permute(1, 0, 2, 3).reshape(e, g * c, h)
    if self.has_gate:
        inner = self._apply_gate(torch.bmm(dispatched, self.gate_up_proj.transpose(1, 2)))
    else:
        inner = self.act_fn(torch.bmm(dispatched, self.up_proj.transpose(1, 2)))
    out = torch.bmm(inner, self.down_proj.transpose(1, 2))  # [e, (g c), h]
    out = out.reshape(e, g, c, h).permute(1, 0, 2, 3).reshape(g, e * c, h)
    return torch.bmm(combine.reshape(g, s, e * c), out).reshape(tokens, hidden)


def use(model, groups, capacity_factor=None):
    """Runs every experts module of `model` that `transformers` lets choose
    its implementation through `dispatch`, with the tokens cut into
    `groups` (the batch size the model will be exported with) and each
    expert's room `capacity_factor` times its even share (`None`: every
    token, the model's own function)."""
    from functools import partial

    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    ALL_EXPERTS_FUNCTIONS[NAME] = partial(dispatch, groups=groups, capacity_factor=capacity_factor)
    configs = {id(model.config): model.config}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None:
            configs[id(config)] = config
    for config in configs.values():
        config._experts_implementation = NAME
    return model
