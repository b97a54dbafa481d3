"""The built-in OpenEnv servers (echo, wordle, arithmetic), their catalogue and their one skeleton."""
