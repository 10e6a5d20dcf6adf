"""A decode step with a host sync and a capture-unsafe call in the per-step path."""

import logging

import torch

logger = logging.getLogger(__name__)


class Sampler(torch.nn.Module):
    def forward(self, logits, temperature):
        probs = torch.softmax(logits / temperature, dim=-1)
        if probs.isnan().any().item():
            logger.warning("NaN in probs: %s", probs)
        return torch.multinomial(probs, 1)


def capture(graph, sampler, logits, temperature):
    with torch.cuda.graph(graph):
        token = sampler(logits, temperature)
        torch.cuda.synchronize()
    return token
