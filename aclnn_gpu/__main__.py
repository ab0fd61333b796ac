"""`python -m aclnn_gpu`: the demo of every operator on the best device present (see demo/)."""
import sys

from .demo import main

sys.exit(main())
