"""The data: the binary format, finding, downloading, generating and converting data folders, and the tf.data pipelines."""
