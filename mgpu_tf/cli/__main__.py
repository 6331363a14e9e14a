import sys

from mgpu_tf.cli import main

sys.exit(main())
