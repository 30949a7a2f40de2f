"""The layer loop the tensor- and context-parallel schedules share: forward through every layer,
then backward, with the timer's fwd and bwd marks and what the check looks at."""
from __future__ import annotations

from .layer import Weights, backward, forward


def layers_step(sched, timer, layer_fn, *, look_grads: bool = False) -> None:
    """Forward through every layer (``layer_fn(layer, weights)``: that layer's function of its
    input), then backward; marks fwd and bwd and looks at the output and the input gradient
    (and each layer's weight gradients with ``look_grads``). Uses ``sched.x``, ``sched.dy`` and
    ``sched.weights``, which the schedule (tp, cp) sets up."""
    saved, x = [], sched.x
    for layer in range(sched.s.layers):
        x_in, y = forward(layer_fn(layer, Weights(*sched.weights[layer])), x)
        saved.append((x_in, y))
        x = y.detach()
    sched.look("out", x)
    timer.mark("fwd")
    dy = sched.dy
    for layer in reversed(range(sched.s.layers)):
        x_in, y = saved[layer]
        dy, grads = backward(x_in, y, dy, sched.weights[layer])
        saved[layer] = None
        if look_grads:
            for i, g in enumerate(grads):
                sched.look(("grad", layer, i), g)
    sched.look("dx", dy)
    timer.mark("bwd")
