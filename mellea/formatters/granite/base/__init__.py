"""What the Granite formatters share: request/response types and processor interfaces."""
