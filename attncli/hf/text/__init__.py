"""A text as the model reads it: its tokens (encoding), each token's text (token_text), a prompt in the model's chat template (chat)."""
