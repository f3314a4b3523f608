import sys
from pathlib import Path

# Let the test files import checks/nixenv.py.
sys.path.insert(0, str(Path(__file__).resolve().parent))
