"""The test command's own tools, run for real: test/fuzz/bounded_run.sh around a libFuzzer
target built here with clang (a timeout is replayed alone before it fails the run; a crash fails
at once), and tools/failure_digest.sh on a ctest project that fails (docs/building.md,
"Fuzzing")."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOUNDED_RUN = ROOT / "test" / "fuzz" / "bounded_run.sh"
DIGEST = ROOT / "tools" / "failure_digest.sh"

# A target that spins about three seconds on the input "SLOW" (every time, or only the first
# time when ONCE names a marker file: a stall that replays would not see) and aborts on "BOOM".
TARGET = r"""
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) {
  const std::string s(reinterpret_cast<const char*>(d), n);
  if (s == "BOOM") std::abort();
  if (s != "SLOW") return 0;
  if (const char* once = std::getenv("ONCE")) {
    if (std::ifstream(once)) return 0;
    std::ofstream(once) << 1;
  }
  volatile unsigned long x = 0;
  for (unsigned long i = 0; i < 6000000000ul; ++i) x += i;
  return 0;
}
"""


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    clang = shutil.which("clang++")
    if clang is None:
        pytest.fail("clang++ is missing: tools/install.sh installs it for the fuzz build", pytrace=False)
    d = tmp_path_factory.mktemp("fuzz")
    (d / "t.cpp").write_text("#include <string>\n" + TARGET)
    subprocess.run([clang, "-O1", "-fsanitize=fuzzer", str(d / "t.cpp"), "-o", str(d / "t")], check=True)
    return d


def bounded_run(d: Path, seed: str, env_extra=None):
    seeds = d / f"seeds-{seed}"
    seeds.mkdir(exist_ok=True)
    (seeds / "s").write_text(seed)
    corpus = d / f"corpus-{seed}"
    corpus.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", **(env_extra or {})}
    return subprocess.run(["bash", str(BOUNDED_RUN), str(d / "t"), "-timeout=2", "-max_total_time=3",
                           f"-artifact_prefix={d}/", str(corpus), str(seeds)],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.timeout(150)
def test_a_timeout_that_recurs_alone_fails_the_run(target):
    r = bounded_run(target, "SLOW")
    assert r.returncode != 0, r.stdout[-2000:]
    assert "times out again when replayed alone (-timeout=2): a slow input" in r.stdout


@pytest.mark.timeout(150)
def test_a_timeout_that_does_not_recur_is_reported_as_a_stall_and_passes(target):
    marker = target / "stalled-once"
    r = bounded_run(target, "SLOW", {"ONCE": str(marker)})
    assert "ERROR: libFuzzer: timeout" in r.stdout  # libFuzzer did report it
    assert r.returncode == 0, r.stdout[-2000:]
    assert r.stdout.count("alone: passed in") == 3
    assert "the machine stalled mid-unit, not the target" in r.stdout


@pytest.mark.timeout(150)
def test_a_crash_fails_at_once_without_replays(target):
    r = bounded_run(target, "BOOM")
    assert r.returncode != 0
    assert "deadly signal" in r.stdout
    assert "bounded_run:" not in r.stdout


@pytest.mark.timeout(150)
def test_the_digest_names_each_failed_test_its_cause_and_the_kept_input(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text("""
cmake_minimum_required(VERSION 3.16)
project(digest NONE)
enable_testing()
add_test(NAME noisy.crash COMMAND bash -c "for i in $(seq 1 3000); do echo \\"#$i NEW cov: 1\\"; done; \
echo '==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1'; \
echo '    #0 0x5 in mpakt::http::parse url.cpp:3'; \
echo 'SUMMARY: AddressSanitizer: heap-buffer-overflow url.cpp:3 in parse'; exit 1")
add_test(NAME quiet.pass COMMAND true)
add_test(NAME slow.one COMMAND sleep 5)
set_tests_properties(slow.one PROPERTIES TIMEOUT 1)
""")
    build = tmp_path / "b"
    subprocess.run(["cmake", "-S", str(tmp_path), "-B", str(build)], check=True, capture_output=True)
    (build / "crashes").mkdir()
    kept = b"GET /\x00 HTTP/1.1\r\n\r\n"
    (build / "crashes" / "t-crash-1").write_bytes(kept)
    ctest = subprocess.run(["ctest", "--test-dir", str(build)], capture_output=True, text=True)
    assert ctest.returncode != 0
    out = subprocess.run(["bash", str(DIGEST), str(build)], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert "noisy.crash: ==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1" in lines
    assert "noisy.crash: SUMMARY: AddressSanitizer: heap-buffer-overflow url.cpp:3 in parse" in lines
    assert "noisy.crash:     #0 0x5 in mpakt::http::parse url.cpp:3" in lines
    assert any(l.startswith("slow.one: no cause named in its output; Test time =") for l in lines), out
    assert not any(l.startswith("quiet.pass") for l in lines)
    assert f"kept input t-crash-1 ({len(kept)} bytes), base64: {base64.b64encode(kept).decode()}" in lines
