#!/usr/bin/env python3
"""The test docs.readme_commands: README.md's "Using tp from your project" as a user follows it.

    readme_commands.py SOURCE_DIR WORK_DIR

In a copy of the checkout it runs the section's install commands exactly as printed, with the
prefix /opt/tp replaced by WORK_DIR/prefix. Then it builds the README's first program (its
"A first program" block, as first_program.cpp) twice: as an outside CMake project made of the
section's CMakeLists.txt, configured as the section says, and with the section's plain g++ line.
Each program must start, and report a missing data folder as an error that names it. The
README's program must be examples/first_program.cpp, which the test example.first_program
trains to its figure.
"""
import os
import re
import shutil
import subprocess
import sys

source, work = map(os.path.abspath, sys.argv[1:3])
prefix = os.path.join(work, "prefix")
# Where the machine has ccache (scripts/setup.sh installs it), the builds go through it, as tp's
# own do: a user's commands, and the same objects as the last run's when nothing changed. The
# commands stay as printed; CMake takes the launcher from its environment variable, and the
# plain g++ line is run after "ccache". base_dir: a checkout elsewhere hits the same entries.
launcher = shutil.which("ccache")
if launcher:
    os.environ.update(CMAKE_CXX_COMPILER_LAUNCHER=launcher, CCACHE_BASEDIR=work)
readme = open(os.path.join(source, "README.md"), encoding="utf-8").read()


def fail(message):
    print(f"readme_commands: {message}", file=sys.stderr)
    sys.exit(1)


def section(title):
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", readme, re.M | re.S)
    if not match:
        fail(f"README.md has no section \"## {title}\"")
    return match.group(1)


def fenced(text, language):
    match = re.search(rf"^```{language}\n(.*?)^```", text, re.M | re.S)
    if not match:
        fail(f"README.md: no ```{language} block where expected")
    return match.group(1)


def indented_blocks(text):
    """The section's indented command blocks, each as one string (continuations joined)."""
    blocks, current = [], []
    for line in text.split("\n") + [""]:
        if line.startswith("    ") and line.strip():
            current.append(line[4:])
        elif current and not line.strip() and not current[-1].endswith("\\"):
            blocks.append("\n".join(current))
            current = []
    return blocks


def run(command, cwd):
    command = command.replace("/opt/tp", prefix)
    print(f"$ {command}  (in {os.path.relpath(cwd, work)})", flush=True)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        fail(f"this command of README.md failed with status {done.returncode}:\n{command}\n{done.stdout[-6000:]}")
    return done.stdout


def check_program(program):
    """It runs, and a missing data folder is an error that names it (status 1)."""
    missing = os.path.join(work, "no-such-data")
    done = subprocess.run([program, missing, os.path.join(work, "train_log")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 1 or "no-such-data" not in done.stdout:
        fail(f"{program} with a missing data folder: status {done.returncode} (want 1), output:\n{done.stdout[-3000:]}")
    print(f"{os.path.relpath(program, work)}: {done.stdout.strip()}")


shutil.rmtree(work, ignore_errors=True)
checkout = os.path.join(work, "tp")
# The checkout without build folders, logs or git (a fresh clone has none of them).
shutil.copytree(source, checkout, ignore=lambda d, names: [n for n in names if d == source and (n.startswith("build") or n in (".git", "train_log"))])

using = section("Using tp from your project")
commands = indented_blocks(using)
install = next((c for c in commands if "cmake --install" in c), None)
compiler_line = next((c for c in commands if c.startswith("g++ ")), None)
if not install or not compiler_line:
    fail("README.md's \"Using tp from your project\" lost its install commands or its g++ line")
run(install, checkout)
for path in ("include/tp/trainer.hpp", "lib/libtp_compiled.a", "bin/tp-run", "bin/tp-export"):
    if not os.path.exists(os.path.join(prefix, path)):
        fail(f"the install commands did not install {path}")

program = fenced(section("A first program"), "cpp")
# The section says "This is examples/first_program.cpp", which example.first_program trains.
if program != open(os.path.join(source, "examples", "first_program.cpp"), encoding="utf-8").read():
    fail("README.md's first program is no longer examples/first_program.cpp: make them the same again")
app = os.path.join(work, "app")
os.makedirs(app)
open(os.path.join(app, "first_program.cpp"), "w").write(program)
open(os.path.join(app, "CMakeLists.txt"), "w").write(fenced(using, "cmake"))
# "configure with -DCMAKE_PREFIX_PATH=/opt/tp", and "with -DCMAKE_BUILD_TYPE=Release".
if "-DCMAKE_PREFIX_PATH=/opt/tp" not in using or "-DCMAKE_BUILD_TYPE=Release" not in using:
    fail("README.md no longer says how to configure the outside project")
run("cmake -S . -B build -DCMAKE_PREFIX_PATH=/opt/tp -DCMAKE_BUILD_TYPE=Release && cmake --build build", app)
check_program(os.path.join(app, "build", "first_program"))

run(f"{launcher} {compiler_line}" if launcher else compiler_line, app)
check_program(os.path.join(app, "first_program"))
print("readme_commands: the install commands, the CMake project and the g++ line of README.md all work")
