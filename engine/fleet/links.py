"""The links a disaggregated fleet moves KV caches over, and what a transfer costs on them (modeled).

Rates are per direction, per GPU (each GPU of a prefill replica sends its share of the KV heads
over its own NIC or NVLink port), from the datasheets:

- NVLink 4 (NVIDIA H100 SXM datasheet: 900 GB/s total, so 450 GB/s each way), within a node;
- NVLink 5 (NVIDIA HGX B200: 1.8 TB/s total, 900 GB/s each way), within a node;
- InfiniBand NDR, 400 Gb/s a port (NVIDIA ConnectX-7 / Quantum-2: 50 GB/s);
- InfiniBand XDR, 800 Gb/s (NVIDIA ConnectX-8 SuperNIC: 100 GB/s);
- RoCE on 400 Gb/s Ethernet (ConnectX-7, Spectrum-X: 50 GB/s);
- 100 Gb/s Ethernet (12.5 GB/s).

Assumed, not measured: a transfer reaches LINK_FRACTION of the rate, and costs LINK_LATENCY_MS
to start. The bytes are the deployment model's KV bytes per token (keys and values of every
layer, per GPU) for the prompt tokens the decode replica did not already cache, at full size.
"""

from __future__ import annotations

from engine.hardware import GB, Deployment

KV_LINKS: dict[str, float] = {"nvlink-4": 450 * GB, "nvlink-5": 900 * GB, "ib-ndr": 50 * GB, "ib-xdr": 100 * GB,
                              "roce-400": 50 * GB, "eth-100": 12.5 * GB}
LINK_FRACTION = 0.8  # share of the line rate a KV transfer reaches (assumption, not fitted)
LINK_LATENCY_MS = 0.01  # a transfer's fixed cost: descriptors exchanged, the first bytes' flight (assumption)


def transfer_bytes(deployment: Deployment, tokens: float) -> float:
    """Bytes one GPU sends for that many tokens' KV (the deployment's tensor-parallel GPUs send theirs
    side by side)."""
    return tokens * deployment.kv_bytes_per_token


def transfer_ms(deployment: Deployment, tokens: float, link: str) -> float:
    """Modeled time to move that many tokens' KV over the link."""
    return LINK_LATENCY_MS + transfer_bytes(deployment, tokens) / (KV_LINKS[link] * LINK_FRACTION) * 1e3
