"""The API's routers, one per area; `create_app` includes them."""
