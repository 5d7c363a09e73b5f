"""tools/decode_profile.py (issue 32 item 3): the step is the last N kernels of the ncu CSV, summed
per kernel function (template arguments dropped), with the time between kernels and the DRAM bytes
against the weights; too few kernels is an error."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import decode_profile  # noqa: E402
import decode_profile_weights  # noqa: E402

HEAD = '"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum"\n'
UNITS = '"","","usecond","Mbyte","Kbyte"\n'


def write_csv(tmp_path, rows):
    p = tmp_path / "ncu.csv"
    body = "".join(f'"{i}","{k}","{t}","{r}","{w}"\n' for i, (k, t, r, w) in enumerate(rows))
    p.write_text("==PROF== noise before the table\n" + HEAD + UNITS + body)
    return p


def test_last_step_summed_per_function(tmp_path):
    rows = [("prefill_kernel(int)", 100, 50, 0)] + [
        ("void opfuse::kernels::GemvKernel<__nv_bfloat16, 4>(opfuse::kernels::GemvParams)", 10, 30, 1),
        ("NormKernel<float>(P)", 2, 1, 1),
        ("void opfuse::kernels::GemvKernel<__nv_bfloat16, 8>(opfuse::kernels::GemvParams)", 20, 60, 2),
    ]
    s = decode_profile.summarize(decode_profile.parse(str(write_csv(tmp_path, rows))), 3, 0.040, 100e6)
    assert s["device_us"] == 32
    assert abs(s["between_kernels_us"] - 8) < 1e-9
    assert s["dram_read_bytes"] == 91e6
    assert abs(s["read_over_weights"] - 0.91) < 1e-9
    gemv = s["by_kernel"][0]
    assert gemv["kernel"] == "GemvKernel" and gemv["launches"] == 2 and gemv["us"] == 30
    assert abs(gemv["gb_per_s"] - (90e6 + 3e3) / 30e3) < 1e-6
    out = subprocess.run([sys.executable, str(ROOT / "tools/decode_profile.py"), str(write_csv(tmp_path, rows)),
                          "--kernels", "9", "--ms-per-token", "1", "--weight-bytes", "1"], capture_output=True, text=True)
    assert out.returncode != 0 and "fewer than one step's 9" in out.stderr


def test_weight_bytes_per_rank():
    c = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
         "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 32000}
    one = decode_profile_weights.weight_bytes(c, 1)
    assert one == 2 * (22 * (2048 * 2048 * 2 + 2 * 2048 * 256 + 3 * 2048 * 5632 + 2 * 2048) + 2048 + 32000 * 2048)
    # at 8 ranks the 4 KV heads are replicated: each rank holds one head's k/v rows
    c8 = decode_profile_weights.weight_bytes(c, 8)
    assert c8 > one // 8
