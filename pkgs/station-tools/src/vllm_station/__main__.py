import sys

from vllm_station.cli import main

sys.exit(main())
