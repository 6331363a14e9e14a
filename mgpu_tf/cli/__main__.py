import sys

from mgpu_tf.cli.app import main

sys.exit(main())
