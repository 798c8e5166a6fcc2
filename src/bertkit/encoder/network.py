"""`Network`: one loaded transformers model and everything about running it, held by every face that runs one.

The encoder, every fine-tuned run and the attributions hold one: its device, precision and engine (checked once,
here), its int8 copy (calibrated by the run's own file, the cache or the packaged texts), a GPU's half copy, whether
it takes token type ids, the padded-inputs pass the runner calls, and the runner itself.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from ..errors import InputError
from .devices import resolve_device, token_budget
from .engines import check_engine, engine_for, engine_named, openvino_forward
from .int8 import calibration_for, quantize_model
from .precision import HALF_DTYPES, check_precision
from .runner import Runner, call_model, takes_type_ids
from .threads import total_threads

# At bf16 and int8 on a CPU, the last bits that a wider padding changes in attention move values across a rounding
# step, and a text's vector then depends on what shares its pass (0.004 at bf16, up to 0.03 at int8; 1e-6 at fp32):
# there passes hold one padded width, a multiple of this. SST-2 dev on 2 AVX-512 cores, texts/s (median of 3), mixed
# widths against one width (a multiple of 1 / 4): int8 555 against 602 / 595, bf16 479 against 469 / 473 (fp32, which
# keeps mixing widths: 282 against 276 / 264). 4 lets a server's requests of nearby lengths share a pass.
ONE_WIDTH_MULTIPLE = 4


class Network:
    """A transformers model on its device, at its precision, on its engine: the forward pass and runner of one.

    Parameters
    ----------
    module : torch.nn.Module
        The loaded model (an `AutoModel`, or a fine-tuned `AutoModelFor...`); moved to `device`.
    tokenizer : transformers tokenizer
        Its fast tokenizer (the pad id; int8 calibration tokenizes with it).
    width : int
        The longest row a pass may hold (the model's position limit).
    max_length : int
        The tokens per text its int8 calibration reads.
    digest : callable
        Returns the hash of the weights that names its OpenVINO graph and its cached int8 calibration.
    source : str
        How the model was named, for messages.
    device, precision, engine
        As `Encoder.from_pretrained` takes them; checked here.
    concurrent_batches : int, optional
        Passes in flight at once (default: 2 on a CPU with 2 or more threads, 1 on a GPU).
    calibration_dir : str, optional
        A folder whose own int8 calibration file to prefer.
    half_copy : bool
        On a GPU at fp16/bf16, run a half copy of the weights (the encoder's way) rather than autocast.
    outputs : tuple of str, optional
        A fine-tuned head's outputs, by name, for its OpenVINO graph; None: an encoder's hidden states.
    call_options : dict, optional
        What every torch pass asks the model for (`output_hidden_states`, `return_dict`).
    """

    def __init__(
        self,
        module: torch.nn.Module,
        tokenizer: Any,
        *,
        width: int,
        max_length: int,
        digest: Callable[[], str],
        source: str,
        device: str | torch.device | None = "auto",
        precision: str = "fp32",
        engine: str | None = None,
        concurrent_batches: int | None = None,
        calibration_dir: str | None = None,
        half_copy: bool = False,
        outputs: tuple[str, ...] | None = None,
        call_options: dict | None = None,
    ) -> None:
        self.device = resolve_device(device)
        self.precision = check_precision(precision, device=self.device)
        self.engine_asked = check_engine(engine, self.device, self.precision)  # before int8 calibrates
        if concurrent_batches is None:  # a GPU takes one batch at a time; CPU cores each take their own
            concurrent_batches = 1 if self.device.type != "cpu" else min(total_threads(), 2)
        if concurrent_batches < 1:
            raise InputError(f"concurrent_batches={concurrent_batches}: give 1 or more.")
        self.concurrent_batches = int(concurrent_batches)
        self.module, self.tokenizer, self.width = module.to(self.device), tokenizer, width
        self.takes_type_ids = takes_type_ids(module)
        self.int8_calibration: str | None = None  # the key of the calibration its int8 copy was made with
        running, precision = module, self.precision
        if self.precision == "int8":  # a copy with int8 linear layers (int8.py); a head stays fp32
            calibration = calibration_for(module, tokenizer, max_length, calibration_dir, digest())
            running, self.int8_calibration = quantize_model(module.eval(), calibration).eval(), calibration.key
        # On a GPU, fp16/bf16 run on a half copy of the weights (as sentence-transformers and TEI do): autocast would
        # cast every weight again in every pass, launches that cost more than a small model's arithmetic there.
        elif half_copy and self.device.type == "cuda" and self.precision in HALF_DTYPES:
            running, precision = copy.deepcopy(module).to(HALF_DTYPES[self.precision]).eval(), "fp32"
        self.running = running  # what torch runs: the model, its int8 copy or its half copy
        build = lambda: openvino_forward(module, self.takes_type_ids, width, self.precision, digest())  # noqa: E731
        self.engine, self.engine_reason, self.openvino = engine_for(
            self.engine_asked, self.device, self.precision, build, source, engine_named(engine)
        )
        self.forward_inputs: Callable[[dict[str, torch.Tensor]], Any]  # the pass on padded inputs that the runner calls
        if self.openvino is not None and outputs is not None:  # a head's outputs by their transformers names
            self.forward_inputs = lambda inputs: SimpleNamespace(**dict(zip(outputs, self.openvino(inputs))))
        else:
            options = {"device": self.device, "precision": precision, **(call_options or {})}
            self.forward_inputs = self.openvino or functools.partial(call_model, running, **options)
        self.max_batch_tokens = token_budget(module, self.device, width)

    def runner(self, batch_size: int) -> Runner:
        """Return the runner of this network's passes: `batch_size` rows at most, within the token budget.

        At bf16 and int8 on a CPU a pass holds texts of one padded width (`ONE_WIDTH_MULTIPLE`): a text's vector is
        then the same whatever shares its pass, as at fp32.
        """
        forward = (self.forward_inputs, self.tokenizer.pad_token_id, self.device, self.max_batch_tokens)
        one_width = self.device.type == "cpu" and self.precision != "fp32"
        return Runner(
            *forward,
            batch_size,
            self.concurrent_batches,
            self.takes_type_ids,
            pad_multiple=ONE_WIDTH_MULTIPLE if one_width else 1,
            max_width=self.width,
            one_width=one_width,
        )
