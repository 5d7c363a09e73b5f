"""scripts/check_gil.py finds Python API use inside a gil_scoped_release scope (the crash of issue 28)
and accepts the release-only-around-the-call form the module uses."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "scripts" / "check_gil.py"

BAD = """
void F() {
  if (x) {
    py::gil_scoped_release release;
    cpu_ = Unwrap(backend->Compile(g));
  }
#ifdef OPFUSE_WITH_CUDA
  py::gil_scoped_release release;
  auto r = Run();
#else
  ThrowStatus(Unavailable("no CUDA"));
#endif
}
"""

GOOD = """
void F() {
  StatusOr<int> r = Status();
  {
    py::gil_scoped_release release;
    r = Run();  // Unwrap( in a comment is fine, "ThrowStatus(" in a string too
  }
  cpu_ = Unwrap(std::move(r));
  py::gil_scoped_release release;
  auto s = Run();
  if (!s.ok()) {
    py::gil_scoped_acquire acquire;
    ThrowStatus(s);
  }
}
"""


def run(tmp_path, text):
    f = tmp_path / "x.cc"
    f.write_text(text)
    return subprocess.run([sys.executable, str(SCRIPT), str(f)], capture_output=True, text=True)


def test_flags_unwrap_under_release(tmp_path):
    p = run(tmp_path, BAD)
    assert p.returncode == 1
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and ":5: " in lines[0] and "Unwrap" in lines[0], p.stdout


def test_accepts_release_around_the_call(tmp_path):
    p = run(tmp_path, GOOD)
    assert p.returncode == 0, p.stdout


def test_module_sources_are_clean():
    p = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout
