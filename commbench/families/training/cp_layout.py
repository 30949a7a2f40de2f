"""Where the sequence lives under context parallelism, and the all-to-alls that move it.

The sequence (each of the micro-batch's sequences) is cut into 2c chunks for
c ranks; rank r holds chunks r and 2c-1-r (causal load balance: an early
chunk with little attention work and a late one with much). All-to-all
groups are blocks of `a` consecutive ranks; the K/V ring runs between ranks
of equal position in the c/a groups. After the all-to-all a rank holds its
group's chunks, sorted by position, for 1/a of the heads.
"""
from __future__ import annotations

from . import groups


class CpLayout:
    def __init__(self, s, ctx, comm):
        self.comm = comm
        self.c, self.a, self.p = s.world, s.a2a_size, s.ring_size
        self.rank = ctx.world.rank
        self.chunk = s.seq_len // (2 * self.c)
        self.mode = s.p("cp_comm")
        self.a2a_group = groups.blocks(ctx, self.a) if self.a > 1 else None
        self.gather_group = groups.world_group(ctx) if self.mode == "all_gather" else None
        self.member, self.ring_index = self.rank % self.a, self.rank // self.a
        self.next = ((self.ring_index + 1) % self.p) * self.a + self.member
        self.prev = ((self.ring_index - 1) % self.p) * self.a + self.member
        self.stale = False   # fault: the next exchange's received data is not used

    def owned(self, rank: int) -> list[int]:
        return [rank, 2 * self.c - 1 - rank]

    def ring_chunks(self, ring_index: int) -> list[int]:
        """Sorted chunk ids a ring member holds (its whole all-to-all group's chunks)."""
        members = range(ring_index * self.a, (ring_index + 1) * self.a)
        return sorted(cid for m in members for cid in self.owned(m))

    def take_stale(self) -> bool:
        stale, self.stale = self.stale, False
        return stale

    # all-to-all between sequence-split and head-split layouts ------------------
    def _order(self):
        """(member, local position) of each chunk of the group, in sorted chunk order."""
        group = self.ring_index * self.a
        pieces = [(cid, m, pos) for m in range(self.a) for pos, cid in enumerate(self.owned(group + m))]
        return [(m, pos) for _cid, m, pos in sorted(pieces)]

    def seq_to_heads(self, tensors: list) -> list:
        """[B, H, L, D] each (local chunks, all heads) -> [B, H/a, a*L, D] (group's chunks, sorted)."""
        import torch

        a, n = self.a, self.chunk
        parts = [t.reshape(t.shape[0], a, t.shape[1] // a, *t.shape[2:]).transpose(0, 1) for t in tensors]
        send = torch.cat(parts, dim=2).contiguous()               # [a, B, sum(H)/a, L, D]
        recv = torch.empty_like(send)
        handle = self.comm.all_to_all(recv, send, self.a2a_group)
        handle.wait()
        if self.take_stale():
            recv = send
        widths = [p.shape[2] for p in parts]
        seq = torch.cat([recv[m][:, :, pos * n:(pos + 1) * n] for m, pos in self._order()], dim=2)
        return list(seq.split(widths, dim=1))

    def heads_to_seq(self, tensors: list) -> list:
        """Inverse of seq_to_heads: [B, h, a*L, D] sorted -> [B, h*a, L, D] local chunks."""
        import torch

        a, n = self.a, self.chunk
        widths = [t.shape[1] for t in tensors]
        seq = torch.cat(tensors, dim=1)                            # [B, sum(h), a*L, D]
        b, h, _, d = seq.shape
        send = torch.empty((a, b, h, 2 * n, d), dtype=seq.dtype, device=seq.device)
        for i, (m, pos) in enumerate(self._order()):
            send[m][:, :, pos * n:(pos + 1) * n] = seq[:, :, i * n:(i + 1) * n]
        recv = torch.empty_like(send)
        self.comm.all_to_all(recv, send, self.a2a_group).wait()
        out, start = [], 0
        for w in widths:                                           # [a, B, w, L, D] -> [B, a*w, L, D]
            out.append(recv[:, :, start:start + w].transpose(0, 1).reshape(b, a * w, 2 * n, d))
            start += w
        return out

    # the whole sequence's K/V from an all-gather ---------------------------------
    def gathered_to_sorted(self, gathered):
        """[c*2, B, H, L, D] (rank-major K,V pairs) -> K, V as [B, H, 2c*chunk, D] in sequence order."""
        import torch

        n = self.chunk
        ks, vs = [], []
        for cid in range(2 * self.c):
            owner = cid if cid < self.c else 2 * self.c - 1 - cid
            pos = 0 if cid < self.c else 1
            ks.append(gathered[2 * owner][:, :, pos * n:(pos + 1) * n])
            vs.append(gathered[2 * owner + 1][:, :, pos * n:(pos + 1) * n])
        return torch.cat(ks, dim=2), torch.cat(vs, dim=2)

    def sorted_to_gathered(self, dk, dv, dtype):
        """Inverse of gathered_to_sorted, for the gradients: [c*2, B, H, L, D] in `dtype`."""
        import torch

        n, c = self.chunk, self.c
        b, h, _, d = dk.shape
        out = torch.empty((2 * c, b, h, 2 * n, d), dtype=dtype, device=dk.device)
        for cid in range(2 * c):
            owner = cid if cid < c else 2 * c - 1 - cid
            pos = 0 if cid < c else 1
            out[2 * owner][:, :, pos * n:(pos + 1) * n] = dk[:, :, cid * n:(cid + 1) * n]
            out[2 * owner + 1][:, :, pos * n:(pos + 1) * n] = dv[:, :, cid * n:(cid + 1) * n]
        return out
