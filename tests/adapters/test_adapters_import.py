"""``import vimpc`` and ``import vimpc.adapters`` load no controller library: do-mpc loads
only when an adapter is called."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_the_adapters_loads_no_dompc():
    code = (
        "import json, sys\n"
        "import vimpc, vimpc.adapters\n"
        "from vimpc.adapters import dompc_model\n"
        "print(json.dumps('do_mpc' in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) is False
